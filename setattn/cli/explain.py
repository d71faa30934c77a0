"""``setattn explain``: a picture of the atoms a trained model's readout attended to."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from setattn.domains.molecules import fragment_note
from setattn.molprop.checkpoint import load_run
from setattn.molprop.device import resolve_device
from setattn.molprop.explain import explain_molecule
from setattn.molprop.limits import MAX_HEAVY_ATOMS
from setattn.molprop.outputs import check_output_file
from setattn.viz import draw_atom_weights

__all__ = ["cmd_explain"]


def cmd_explain(args: argparse.Namespace) -> int:
    """Draw the picture; print the prediction. Returns the exit status."""
    output = Path(args.output)
    if output.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"argument --output: {output} must end in .png or .svg")
    model = Path(args.model)
    check_output_file(output, {"--model": model if model.is_file() else model / "config.json"})
    models, meta = load_run(args.model, resolve_device(args.device))
    weights, prediction = explain_molecule(  # (N, H), (T,)
        models[0], args.smiles, meta.get("max_heavy_atoms", MAX_HEAVY_ATOMS))
    heads = weights.shape[1]
    panels = [weights.mean(1)]  # (N,) each
    legends = [f"readout attention, mean of {heads} heads"]
    if args.heads:
        panels += [weights[:, h] for h in range(heads)]
        legends += [f"head {h}" for h in range(heads)]
    draw_atom_weights(args.smiles, torch.stack(panels), output, legends=legends)
    values = ", ".join(f"{t} {v:.4g}" for t, v in zip(meta["target_columns"],
                                                        prediction.tolist()))
    which = f" (model_0 of an ensemble of {len(models)})" if len(models) > 1 else ""
    if models[0].kernel is not None:
        which += (f"; the prediction weighs the attention network {float(models[0].blend):g} "
                  "and the descriptor kernel ridge the rest, the picture is the network's")
    note = fragment_note(args.smiles)
    which += f" (note: {note})" if note else ""
    print(f"{args.smiles}: predicted {values}{which}; attention drawn in {output}")
    return 0
