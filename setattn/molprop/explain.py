"""Why a molecule model predicted what it did: one contribution per atom.

``explain_molecule(models, smiles, method)`` returns a ``MoleculeExplanation``: a
contribution per heavy atom of ``Chem.MolFromSmiles(smiles)`` to the prediction of a
model or an ensemble as ``setattn predict`` gives it (each network blended with its
kernel ridge when there is one; an ensemble's members averaged: their mean in target
units, or the logit of their mean probability), in the target's units for regression
and in logits for classification. The methods (``setattn.explain``), measured against
known per-atom truth by ``benchmarks/attribution.py``:

- ``integrated-gradients`` (the default: the best there on the validation molecules of
  both tasks): captum's integrated gradients from all-zero atom features
  and all-zero descriptors (the empty molecule); each descriptor's attribution is
  carried to the atoms by ``descriptor_shares`` (exact for additive descriptors such as
  logP, TPSA, fragment counts; even for the others), and where the model stacks a
  fingerprint kernel ridge, its Morgan counts walk from zero as well, each slot's
  attribution carried to the atoms of the environments that set it
  (``fingerprint_shares``). The contributions sum to the
  prediction minus the baseline's prediction, up to captum's convergence delta.
- ``occlusion``: the prediction minus the prediction of the molecule with the atom
  replaced by a dummy atom (``*``, no hydrogens, bonds kept), re-featurised from the
  edited molecule (atom and bond features, descriptors, hence the kernel ridge too).
  No sum is claimed.
- ``readout``: exact per-atom terms where the model's readout allows it; the molecule
  model's MLP head over pooled atoms and descriptors does not (a clear error).
- ``attention``: the readout's attention weight of each atom times the atom count
  (1 = uniform), averaged over heads (and over an ensemble's members); not a
  contribution to the prediction.

Atoms of fragments the model does not see (salts: only the largest fragment is kept)
get 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from rdkit import Chem, rdBase
from torch import Tensor, nn
from torch.nn import functional as F
from torch_geometric.data import Batch, Data

from setattn.chem.descriptors import descriptor_set
from setattn.chem.shares import descriptor_shares
from setattn.domains.fingerprints import fingerprint_shares
from setattn.domains.molecules import InvalidSmilesError, mol_to_data, parse_smiles
from setattn.explain import (
    Attribution,
    attention_contributions,
    integrated_gradients,
    occlusion,
    readout_contributions,
)
from setattn.molprop.batching import collate_molecules
from setattn.molprop.featurize import featurize
from setattn.molprop.limits import MAX_HEAVY_ATOMS
from setattn.molprop.model import MoleculeModel
from setattn.molprop.options import SettingError

__all__ = ["DEFAULT_METHOD", "EnsembleOutput", "MoleculeExplanation", "ModelOutput",
           "dummy_atom", "explain_molecule", "explain_smiles"]

DEFAULT_METHOD = "integrated-gradients"
"""The method ``setattn explain`` uses unless told; chosen on the validation molecules of
``benchmarks/attribution.py`` (its record: ``benchmarks/results/attribution.json``; the
comparison: ``docs/guide/explanations.rst``)."""


class ModelOutput(nn.Module):
    """The quantity explained: a ``MoleculeModel``'s prediction, differentiable.

    The network blended with the kernel ridge (when the model has one), as ``predict``
    gives it: in target units (regression), or as the logit of each task's probability
    (classification).
    """

    def __init__(self, model: MoleculeModel):
        super().__init__()
        self.model = model

    def forward(self, batch: Batch) -> Tensor:
        """(G, T) predictions in target units, or logits."""
        m = self.model
        kernel_out = m.kernel_outputs(batch) if m.kernel is not None else None
        blended = m.combine(m(batch), kernel_out)  # (G, T) standardised, or logits
        return m.to_units(blended) if m.config.task == "regression" else blended


class EnsembleOutput(nn.Module):
    """The quantity explained for an ensemble: its prediction as ``predict`` gives it,
    differentiable: the members' ``ModelOutput`` averaged in target units (regression),
    or the logit of the members' mean probability (classification)."""

    def __init__(self, models: Sequence[MoleculeModel]):
        super().__init__()
        self.members = nn.ModuleList([ModelOutput(m) for m in models])
        self.regression = models[0].config.task == "regression"

    def forward(self, batch: Batch) -> Tensor:
        """(G, T) predictions in target units, or logits."""
        outs = torch.stack([member(batch) for member in self.members])  # (K, G, T)
        if self.regression:
            return outs.mean(0)  # (G, T)
        # log(mean p) - log(mean (1 - p)) in log space: logit(mean(sigmoid)) in float32
        # loses the logit of a probability near 0 or 1 (IG then no longer sums)
        return (torch.logsumexp(F.logsigmoid(outs), 0)
                - torch.logsumexp(F.logsigmoid(-outs), 0))  # (G, T)


@dataclass
class MoleculeExplanation:
    """Contributions of the atoms of one SMILES.

    Attributes:
        smiles: the SMILES as given.
        symbols: element symbols of the atoms of ``Chem.MolFromSmiles(smiles)``.
        attribution: values (N_all,) per atom of that molecule (0 for atoms outside
            the fragment the model sees), prediction and baseline in ``unit``.
        unit: what the values are in ("target units", "logit", "relative attention").
        probability: for classification, the predicted probability; else None.
    """

    smiles: str
    symbols: list[str]
    attribution: Attribution
    unit: str
    probability: float | None = None


def dummy_atom(mol: Chem.Mol, i: int) -> Chem.Mol:
    """``mol`` with atom i replaced by a dummy atom ``*`` (no hydrogens, no charge);
    its bonds, their orders and the aromaticity of its ring are kept."""
    edited = Chem.RWMol(mol)
    atom = edited.GetAtomWithIdx(i)
    atom.SetAtomicNum(0)
    atom.SetFormalCharge(0)
    atom.SetNoImplicit(True)
    atom.SetNumExplicitHs(0)
    atom.SetChiralTag(Chem.ChiralType.CHI_UNSPECIFIED)
    out = edited.GetMol()
    Chem.SanitizeMol(out)
    return out


def _variant(mol: Chem.Mol, i: int, descriptors: str | None) -> Data | None:
    """The model's input for ``mol`` with atom i occluded (None if RDKit refuses it)."""
    try:
        return mol_to_data(dummy_atom(mol, i), largest_fragment=False, descriptors=descriptors,
                           fingerprint=bool(descriptors))
    except (ValueError, RuntimeError, Chem.rdchem.MolSanitizeException):
        return None


def _fragment(smiles: str) -> tuple[Chem.Mol, Chem.Mol, list[int]]:
    """The parsed molecule, the fragment the model sees (as ``keep_largest_fragment``),
    and the fragment's atoms' indices in the whole molecule."""
    mol = parse_smiles(smiles)
    fragments = Chem.GetMolFrags(mol)
    if len(fragments) <= 1:
        return mol, mol, list(range(mol.GetNumAtoms()))
    atoms = list(max(fragments, key=len))  # max keeps the first on ties
    return mol, Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=False)[
        fragments.index(tuple(atoms))], atoms


def _members(model: MoleculeModel | Sequence[MoleculeModel]) -> list[MoleculeModel]:
    """The ensemble's members (one for a single model), checked to share their inputs
    and outputs."""
    models = [model] if isinstance(model, MoleculeModel) else list(model)
    if not models:
        raise ValueError("argument models: explain needs at least one model")
    first = models[0].config
    for k, m in enumerate(models[1:], 1):
        c = m.config
        if (c.task, c.num_tasks, c.descriptor_dim) != (first.task, first.num_tasks,
                                                       first.descriptor_dim):
            raise ValueError(f"argument models: member {k} is not of member 0's kind "
                             f"(task, tasks and descriptors differ)")
    return models


def _output_of(models: list[MoleculeModel]) -> nn.Module:
    """What is explained: one model's ``ModelOutput`` or the ``EnsembleOutput``."""
    forward = ModelOutput(models[0]) if len(models) == 1 else EnsembleOutput(models)
    return forward.eval()


def _attention(models: list[MoleculeModel], data: Data, target: int) -> Attribution:
    """The readout's relative attention, averaged over the members, with the
    ensemble's prediction."""
    parts = [attention_contributions(ModelOutput(m).eval(), data, "model.pool", target)
             for m in models]
    if len(parts) == 1:
        return parts[0]
    with torch.no_grad():
        prediction = float(_output_of(models)(collate_molecules([data]))[0, target])
    values = torch.stack([p.values for p in parts]).mean(0)  # (N,)
    return replace(parts[0], values=values, prediction=prediction,
                   note=f"{parts[0].note}; mean over {len(parts)} members")


def _attribute(models: list[MoleculeModel], mol: Chem.Mol, data: Data, method: str,
               target: int) -> Attribution:
    forward = _output_of(models)
    kind = descriptor_set(models[0].config.descriptor_dim)
    uses_descriptors = kind is not None
    if method == "occlusion":
        with rdBase.BlockLogs():
            variants = [_variant(mol, i, kind) for i in range(mol.GetNumAtoms())]
        return occlusion(forward, data, variants, target,
                         note="prediction minus the prediction with the atom replaced by a "
                         "dummy atom (*, no hydrogens), re-featurised with its descriptors")
    if method == "integrated-gradients":
        inputs, shares = [], []
        if uses_descriptors:
            split, _ = descriptor_shares(mol, data.descriptors[0].double().numpy(), kind)
            inputs.append("descriptors")
            shares.append(torch.from_numpy(split).float())
        if any(m.uses_fingerprints() for m in models):  # the slots' counts walk from zero
            inputs.append("fingerprint")
            shares.append(torch.from_numpy(fingerprint_shares(mol)).float())
        return integrated_gradients(forward, data, target, graph_inputs=inputs,
                                    node_shares=shares)
    if method == "readout":  # the molecule model has no sum over atoms: a clear error
        return readout_contributions(models[0], data, target)
    if method == "attention":
        return _attention(models, data, target)
    raise SettingError("method", f"unknown method {method!r}", colon=True)


def explain_molecule(model: MoleculeModel | Sequence[MoleculeModel], smiles: str,
                     method: str = DEFAULT_METHOD, target: int = 0,
                     max_heavy_atoms: int = MAX_HEAVY_ATOMS) -> MoleculeExplanation:
    """One contribution per atom of ``smiles`` to the prediction of ``target``.

    Args:
        model: a trained model, or an ensemble's members (``checkpoint.load_run``'s
            list): then the explained prediction is the ensemble's, as ``predict``
            gives it.
        smiles: the molecule.
        method: one of ``setattn.explain.METHODS``.
        target: the task explained.
        max_heavy_atoms: the size limit (``setattn.molprop.limits``); the run's own.

    Raises:
        InvalidSmilesError: if ``smiles`` does not parse (``MoleculeSkippedError`` if it
            is over the size limit).
        ValueError: for an unknown method, ``readout`` on a model without one, no
            model, or members of different kinds.
    """
    models = _members(model)
    for m in models:
        m.eval()
    whole, mol, atoms = _fragment(smiles)
    data = featurize(smiles, models[0].config.descriptor_dim, max_heavy_atoms=max_heavy_atoms)
    attribution = _attribute(models, mol, data, method, target)
    values = torch.zeros(whole.GetNumAtoms(), device="cpu")  # (N_all,): explain runs on the CPU
    values[atoms] = attribution.values.float()
    attribution.values = values
    classification = models[0].config.task != "regression"
    unit = "relative attention" if method == "attention" else (
        "logit" if classification else "target units")
    probability = None
    if classification:
        batch = collate_molecules([data])
        with torch.no_grad():  # the ensemble's: the mean of the members' probabilities
            probability = float(torch.stack([m.predict(batch)[0, target]
                                             for m in models]).mean())
    symbols = [a.GetSymbol() for a in whole.GetAtoms()]
    return MoleculeExplanation(smiles, symbols, attribution, unit, probability)


def explain_smiles(model: MoleculeModel | Sequence[MoleculeModel], smiles: str,
                   method: str = DEFAULT_METHOD, target: int = 0,
                   max_heavy_atoms: int = MAX_HEAVY_ATOMS) -> MoleculeExplanation:
    """``explain_molecule`` for the command line and ``MoleculePredictor.explain``: a SMILES
    that does not parse is a ``SettingError`` naming ``smiles`` (``--smiles`` there)."""
    try:
        return explain_molecule(model, smiles, method, target, max_heavy_atoms)
    except InvalidSmilesError as err:
        raise SettingError("smiles", str(err), colon=True) from None
