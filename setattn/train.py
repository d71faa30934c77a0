"""Deprecated alias: the trainer moved to ``setattn.molprop`` (see CHANGELOG.md).

Importing this module warns (``DeprecationWarning``); it will be removed in 0.3.
"""

import warnings

from setattn.domains.descriptors import descriptor_count
from setattn.domains.molecules import rdkit_descriptors
from setattn.files import atomic_open
from setattn.molprop.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_model,
    load_run,
    save_checkpoint,
)
from setattn.molprop.config import FORMAT, RunConfig, TrainConfig, legacy_batch_size
from setattn.molprop.featurize import featurize
from setattn.molprop.loop import DivergedError, FitResult, fit
from setattn.molprop.metrics import (
    average_precision,
    classification_metrics,
    evaluate,
    masked_loss,
    regression_metrics,
    roc_auc,
    shard_loss,
)
from setattn.molprop.predict import predict, predict_all
from setattn.molprop.run import run_training

__all__ = [
    "FORMAT", "CheckpointError", "DivergedError", "FitResult", "RunConfig", "TrainConfig",
    "atomic_open", "average_precision", "classification_metrics", "descriptor_count",
    "evaluate", "featurize", "fit", "legacy_batch_size", "load_checkpoint", "load_model",
    "load_run", "masked_loss", "predict", "predict_all", "rdkit_descriptors",
    "regression_metrics", "roc_auc", "run_training", "save_checkpoint", "shard_loss",
]

warnings.warn("setattn.train is deprecated: import from setattn.molprop instead "
              "(see CHANGELOG.md)", DeprecationWarning, stacklevel=2)
