"""Why a molecule model predicted what it did: one contribution per atom.

``explain_molecule(ensemble, smiles, method)`` returns a ``MoleculeExplanation``: a
contribution per heavy atom of ``Chem.MolFromSmiles(smiles)`` to the ensemble's
prediction as ``setattn predict`` gives it (``Ensemble.forward``: each network stacked
with the kernel part, the members averaged: their mean in target units, or the logit of
their mean probability), in the target's units for regression and in logits for
classification. The methods (``setattn.explain``), measured against
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

from dataclasses import dataclass, replace

import torch
from rdkit import Chem, rdBase
from torch_geometric.data import Data

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
from setattn.molprop.config import MAX_HEAVY_ATOMS, SettingError
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.featurize import featurize

__all__ = ["DEFAULT_METHOD", "MoleculeExplanation", "PictureLabels", "dummy_atom",
           "explain_molecule", "explain_smiles", "picture_labels", "prediction_text", "sum_text"]

DEFAULT_METHOD = "integrated-gradients"
"""The method ``setattn explain`` uses unless told; chosen on the validation molecules of
``benchmarks/attribution.py`` (its record: ``benchmarks/results/attribution.json``; the
comparison: ``docs/guide/explanations.rst``)."""


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


def _attention(ensemble: Ensemble, data: Data, target: int) -> Attribution:
    """The readout's relative attention, averaged over the members, with the
    ensemble's prediction."""
    parts = [attention_contributions(ensemble.member(k).eval(), data, "networks.0.pool",
                                     target) for k in range(len(ensemble))]
    if len(parts) == 1:
        return parts[0]
    with torch.no_grad():
        prediction = float(ensemble(collate_molecules([data]))[0, target])
    values = torch.stack([p.values for p in parts]).mean(0)  # (N,)
    return replace(parts[0], values=values, prediction=prediction,
                   note=f"{parts[0].note}; mean over {len(parts)} members")


def _attribute(ensemble: Ensemble, mol: Chem.Mol, data: Data, method: str,
               target: int) -> Attribution:
    forward = ensemble.eval()
    kind = descriptor_set(ensemble.descriptor_dim)
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
        if ensemble.uses_fingerprints():  # the slots' counts walk from zero
            inputs.append("fingerprint")
            shares.append(torch.from_numpy(fingerprint_shares(mol)).float())
        return integrated_gradients(forward, data, target, graph_inputs=inputs,
                                    node_shares=shares)
    if method == "readout":  # the molecule model has no sum over atoms: a clear error
        return readout_contributions(ensemble.networks[0], data, target)
    if method == "attention":
        return _attention(ensemble, data, target)
    raise SettingError("method", f"unknown method {method!r}", colon=True)


def explain_molecule(ensemble: Ensemble, smiles: str,
                     method: str = DEFAULT_METHOD, target: int = 0,
                     max_heavy_atoms: int = MAX_HEAVY_ATOMS) -> MoleculeExplanation:
    """One contribution per atom of ``smiles`` to the prediction of ``target``.

    Args:
        ensemble: the trained model (``checkpoint.load_run``'s); the explained
            prediction is the ensemble's, as ``predict`` gives it.
        smiles: the molecule.
        method: one of ``setattn.explain.METHODS``.
        target: the task explained.
        max_heavy_atoms: the size limit (``setattn.molprop.config``); the run's own.

    Raises:
        InvalidSmilesError: if ``smiles`` does not parse (``MoleculeSkippedError`` if it
            is over the size limit).
        ValueError: for an unknown method, or ``readout`` on a model without one.
    """
    ensemble.eval()
    whole, mol, atoms = _fragment(smiles)
    data = featurize(smiles, ensemble.descriptor_dim, max_heavy_atoms=max_heavy_atoms)
    attribution = _attribute(ensemble, mol, data, method, target)
    values = torch.zeros(whole.GetNumAtoms(), device="cpu")  # (N_all,): explain runs on the CPU
    values[atoms] = attribution.values.float()
    attribution.values = values
    classification = ensemble.task != "regression"
    unit = "relative attention" if method == "attention" else (
        "logit" if classification else "target units")
    probability = None
    if classification:
        batch = collate_molecules([data])
        with torch.no_grad():  # the ensemble's: the mean of the members' probabilities
            probability = float(ensemble.member_units(batch)[:, 0, target].mean())
    symbols = [a.GetSymbol() for a in whole.GetAtoms()]
    return MoleculeExplanation(smiles, symbols, attribution, unit, probability)


def explain_smiles(ensemble: Ensemble, smiles: str,
                   method: str = DEFAULT_METHOD, target: int = 0,
                   max_heavy_atoms: int = MAX_HEAVY_ATOMS) -> MoleculeExplanation:
    """``explain_molecule`` for the command line and ``MoleculePredictor.explain``: a SMILES
    that does not parse is a ``SettingError`` naming ``smiles`` (``--smiles`` there)."""
    try:
        return explain_molecule(ensemble, smiles, method, target, max_heavy_atoms)
    except InvalidSmilesError as err:
        raise SettingError("smiles", str(err), colon=True) from None


@dataclass(frozen=True)
class PictureLabels:
    """What an explanation's picture says besides the atoms' colours.

    Attributes:
        title: three lines: the SMILES, the prediction, the method and the sum.
        unit: the colour bar's caption, in the contributions' units.
        centre: the neutral (white) value: 0, or 1 for attention relative to uniform.
        limit: the distance from ``centre`` drawn at full colour (None: the largest).
    """

    title: str
    unit: str
    centre: float
    limit: float | None


def prediction_text(e: MoleculeExplanation, target: str) -> str:
    """The explained prediction in words: the value, or the probability and its logit."""
    a = e.attribution
    if e.probability is not None:
        return f"P({target}) {e.probability:.3f} (logit {a.prediction:+.3f})"
    return f"{target} {a.prediction:.3f}"


def sum_text(e: MoleculeExplanation) -> str:
    """What the contributions sum to (prediction minus baseline), or that the method
    claims no sum."""
    a = e.attribution
    if not a.complete:
        return "contributions claim no sum"
    return (f"contributions sum to prediction - baseline ({a.prediction - a.baseline:+.3f}; "
            f"baseline {a.baseline:+.3f})")


def picture_labels(e: MoleculeExplanation, target: str, method: str) -> PictureLabels:
    """The title, caption and colour scale of ``e``'s picture (``method`` named in it)."""
    a = e.attribution
    unit = {"target units": f"contribution to {target}", "logit": f"contribution to the logit "
            f"of {target}", "relative attention": "attention weight x atoms (1 = uniform)"}
    title = f"{e.smiles}\npredicted {prediction_text(e, target)}\n{method}: {sum_text(e)}"
    # attention: full colour at 0 and 2 (never / twice uniform), so near-uniform looks pale
    limit = max(float((a.values - 1).abs().max()), 1.0) if e.unit == "relative attention" \
        else None
    return PictureLabels(title, unit[e.unit], float(a.centre), limit)
