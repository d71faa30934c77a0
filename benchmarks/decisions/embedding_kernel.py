"""A kernel ridge on a pretrained encoder's frozen molecule vectors, stacked with the kernel
part, against the kernel part alone: validation RMSE on development splits.

The decision it serves and its rule are in ``benchmarks/decisions/DECISIONS.md`` ("Pretrained
encoder as a kernel"). For every (set, split, seed) the parts are fitted on the training
part and scored on the validation part (no test row is read):

* the kernel part as the default model fits it (``KernelPart.fit``: descriptor and
  fingerprint kernel ridges stacked by their leave-one-out residuals);
* a ``KernelRidge`` on the encoder's vectors (``setattn embed``'s, 2 x hidden numbers),
  with the same grid and leave-one-out search;
* their stack ``w kernel part + (1 - w) vectors``, w from ``stack_weight`` on both
  parts' leave-one-out residuals over the training molecules (centre 1, unshrunk).

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/decisions/embedding_kernel.py \\
        --encoder setattn/molprop/encoders/moses_pieces20.pt --seeds 47 48 49

It prints one table and writes the per-split numbers to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data
from tqdm import tqdm

from setattn.chem.descriptors import descriptor_set_named
from setattn.molprop.featurize import featurize
from setattn.molprop.kernels import KernelConfig, KernelPart, KernelRidge
from setattn.molprop.predict import embed_smiles
from setattn.molprop.pretrain import encoder_ensemble
from setattn.molprop.stacking import stack_weight

from helpers.molecule_jobs import load_set, split_labels
from helpers.record import command_line, git_state

ROWS = tuple((name, kind) for name in ("freesolv", "esol", "huuskonen")
             for kind in ("random", "scaffold"))


def features(smiles: list[str], encoder: Path) -> tuple[list[Data], torch.Tensor]:
    """Every molecule's descriptors and fingerprint (the kernel part's inputs) and the
    encoder's vectors (M, 2 D)."""
    width = descriptor_set_named("rdkit").width
    data = [featurize(s, width) for s in tqdm(smiles, desc="featurising", unit="mol",
                                              leave=False)]
    vectors, _ = embed_smiles(encoder_ensemble(encoder), smiles)  # (M, 2 D)
    return data, vectors.double()


def fit_and_score(data: list[Data], vectors: torch.Tensor, y: np.ndarray, train: list[int],
                  val: list[int]) -> dict:
    """The three parts fitted on ``train`` and their validation RMSE (target units)."""
    mean, std = float(np.mean(y[train])), float(np.std(y[train]))
    y_train = torch.tensor((y[train] - mean) / std)[:, None]  # (M, 1) standardised
    width = data[0].descriptors.shape[1]
    config = KernelConfig(size=len(train), descriptor_dim=width, num_tasks=1, fingerprints=True)
    part, _ = KernelPart.fit([data[i] for i in train], y_train, config)
    # KernelPart.fit keeps the descriptor ridge's leave-one-out residuals but not the
    # fingerprint ridge's: fitting that ridge again on the same rows gives them
    fingerprints = torch.cat([data[i].fingerprint for i in train])
    _, fp_residuals = part.fingerprint.fit(fingerprints, y_train, part.descriptor.searched)
    mix = float(part.mix[0])
    r_part = mix * part.descriptor.loo_residuals[0] + (1 - mix) * fp_residuals[0]  # (L,)
    ridge = KernelRidge(len(train), vectors.shape[1], 1)
    info = ridge.fit(vectors[train], y_train)
    (rows_part, _), (rows_ridge, _) = part.descriptor.searched[0], ridge.searched[0]
    assert torch.equal(rows_part, rows_ridge), "the two searches saw different molecules"
    weight = stack_weight(r_part, ridge.loo_residuals[0], centre=1.0, shrink=False)
    held = Data(descriptors=torch.cat([data[i].descriptors for i in val]),
                fingerprint=torch.cat([data[i].fingerprint for i in val]))
    with torch.no_grad():
        p_part = part(held)[:, 0].double()  # (V,)
        p_ridge = ridge(vectors[val].to(ridge.centres.dtype))[:, 0].double()  # (V,)
    truth = torch.tensor(y[val])

    def rmse(pred: torch.Tensor) -> float:
        return math.sqrt(float(((pred * std + mean) - truth).square().mean()))

    return {"kernel_part": rmse(p_part), "vectors": rmse(p_ridge),
            "stack": rmse(weight * p_part + (1 - weight) * p_ridge), "weight": weight,
            "vector_kernel": info["kernel"], "train": len(train), "val": len(val)}


def run(args: argparse.Namespace) -> dict:
    results = []
    for name in dict(ROWS):
        table = load_set(name)
        y = table.targets()[:, 0]
        data, vectors = features(table.smiles, args.encoder)
        for kind in (k for n, k in ROWS if n == name):
            for seed in args.seeds:
                labels = split_labels(kind, table.smiles, seed)
                train = [i for i, part in enumerate(labels) if part == "train"]
                val = [i for i, part in enumerate(labels) if part == "val"]
                start = time.perf_counter()
                scores = fit_and_score(data, vectors, y, train, val)
                results.append({"set": name, "split": kind, "seed": seed, **scores,
                                "seconds": time.perf_counter() - start})
                print(f"{name} {kind} seed {seed}: done", flush=True)
    return {"command": command_line(), "commit": git_state()[0],
            "encoder": str(args.encoder), "metric": "validation RMSE, target units",
            "splits": results}


def summary(record: dict) -> tuple[str, float, float]:
    """The table (mean validation RMSE per row over the seeds), the geometric mean of
    stack / kernel part and the worst row's ratio."""
    lines = ["| set | split | kernel part | vectors alone | stack | stack / kernel part |"
             " weight of the kernel part |", "|---|---|---|---|---|---|---|"]
    ratios = []
    for name, kind in ROWS:
        rows = [r for r in record["splits"] if (r["set"], r["split"]) == (name, kind)]
        if not rows:
            continue
        mean = {k: float(np.mean([r[k] for r in rows]))
                for k in ("kernel_part", "vectors", "stack", "weight")}
        ratios.append(mean["stack"] / mean["kernel_part"])
        lines.append(f"| {name} | {kind} | {mean['kernel_part']:.3f} | {mean['vectors']:.3f} "
                     f"| {mean['stack']:.3f} | {ratios[-1]:.3f} | {mean['weight']:.2f} |")
    geo = math.exp(float(np.mean(np.log(ratios))))
    return "\n".join(lines), geo, max(ratios)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--encoder", type=Path, required=True, help="a pretrained encoder.pt")
    p.add_argument("--seeds", type=int, nargs="+", required=True, help="development seeds")
    p.add_argument("--out", type=Path, default=Path("runs/embedding_kernel.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    record = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    text, geo, worst = summary(record)
    print(text)
    print(f"geometric mean of stack / kernel part {geo:.3f}, worst row {worst:.3f} "
          f"(rule: at most 0.99 and 1.02); per split: {args.out}")


if __name__ == "__main__":
    main()
