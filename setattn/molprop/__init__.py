"""Molecule property prediction: the product behind ``setattn train / pretrain / predict /
embed / explain``.

The modules, in the order data flows through them:

- ``config``: every setting of a run (``RunConfig``, ``TrainConfig``, ``NetworkConfig``)
  with its default, check, bounds and command-line flag; the options of
  ``MoleculePredictor``.
- the model, as parts passed in: ``network`` (``MoleculeNetwork``, the attention
  network), ``kernels`` (``KernelPart``: kernel ridges on descriptors and fingerprints,
  fitted in closed form), ``stacking`` (the one least-squares weight that stacks two
  parts) and ``ensemble`` (``Ensemble``: K networks, one kernel part, one weight; the one
  loop over batches).
- ``featurize``: SMILES and CSVs -> ``Data`` (cached, parallel; invalid rows reported);
  ``batching``: the one batcher; ``splits``: random, scaffold, k-fold and column splits.
- ``metrics``: masked losses and metrics; ``conformal``: prediction intervals;
  ``checkpoint``: a run directory's files (the safe checkpoint format, the lock, output
  checks); ``loop``: ``fit`` one network; ``run``: ``run_training``, a whole run
  directory, what its ``metrics.json`` records and the memory it needs;
  ``distributed``: torchrun and devices; ``workers``: work in forked processes;
  ``pretrain``: self-supervised pretraining of the networks' encoder on unlabelled
  SMILES, and loading it for fine-tuning.
- ``predict``: predictions (and the networks' molecule vectors) for SMILES, streamed
  from CSVs of any size, with ``chunk_cache``; ``explain``: one contribution per atom
  to a prediction, and its words.
- ``api``: ``MoleculePredictor``, all of the above from Python (``fit`` / ``predict`` /
  ``predict_std`` / ``transform`` / ``explain`` / ``save`` / ``load``), a scikit-learn
  estimator.

Submodules keep their own names (``setattn.molprop.featurize.featurize``): the package
exports no function named like one.
"""

from setattn.molprop.api import MoleculePredictor
from setattn.molprop.batching import PackedMolecules, batches, collate_molecules
from setattn.molprop.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_network,
    load_run,
    save_checkpoint,
)
from setattn.molprop.config import KERNEL_MAX_TRAIN, NetworkConfig, RunConfig, TrainConfig
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.explain import explain_molecule
from setattn.molprop.featurize import featurize_csv
from setattn.molprop.kernels import KernelConfig, KernelPart
from setattn.molprop.loop import CHECKPOINT_SECONDS, DivergedError, FitResult, fit
from setattn.molprop.metrics import evaluate
from setattn.molprop.network import MoleculeNetwork
from setattn.molprop.predict import predict_csv
from setattn.molprop.run import run_training

__all__ = ["CHECKPOINT_SECONDS", "KERNEL_MAX_TRAIN", "CheckpointError", "DivergedError",
           "Ensemble", "FitResult", "KernelConfig", "KernelPart", "MoleculeNetwork",
           "MoleculePredictor", "NetworkConfig", "PackedMolecules", "RunConfig", "TrainConfig",
           "batches", "collate_molecules", "evaluate", "explain_molecule", "featurize_csv", "fit",
           "load_checkpoint", "load_network", "load_run", "predict_csv", "run_training",
           "save_checkpoint"]
