"""What a molecule model looked at: the readout's attention over the atoms of a molecule."""

from __future__ import annotations

import torch

from setattn.capture import capture
from setattn.domains.molecules import InvalidSmilesError
from setattn.molprop.batching import collate_molecules
from setattn.molprop.device import model_device, to_device
from setattn.molprop.featurize import featurize
from setattn.molprop.limits import MAX_HEAVY_ATOMS
from setattn.molprop.model import MoleculeModel

__all__ = ["explain_molecule"]


@torch.no_grad()
def explain_molecule(model: MoleculeModel, smiles: str, max_heavy_atoms: int = MAX_HEAVY_ATOMS
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The readout's attention over a molecule's atoms (its largest fragment), and the
    prediction; molecules with more than ``max_heavy_atoms`` heavy atoms are refused.

    Returns:
        weights (N, H): head h's attention weight of atom j (each column sums to 1),
        and the prediction (T,) in target units or probabilities, both on the CPU.

    Raises:
        ValueError: naming ``--smiles`` if it does not parse.
    """
    try:
        data = featurize(smiles, model.config.descriptor_dim, max_heavy_atoms=max_heavy_atoms)
    except InvalidSmilesError as err:
        raise ValueError(f"argument --smiles: {err}") from None
    model.eval()
    batch = to_device(collate_molecules([data]), model_device(model))
    with capture() as captured:
        prediction = model.predict(batch)[0]  # (T,)
    pool = captured["pool"]
    atoms = pool.edge_index[0]  # (E,) source atom of each atom -> molecule edge
    weights = pool.weights.new_zeros(data.num_nodes, pool.weights.shape[1])  # (N, H)
    weights[atoms] = pool.weights
    return weights.cpu(), prediction.cpu()
