"""Which kernel suits the descriptor kernel ridge? Leave-one-out error on training parts.

The kernel ridge (``setattn.molprop.kernel``) chooses its RBF width and ridge by exact
leave-one-out error over its training molecules. This script asks the same question of
other kernels on the same standardised descriptors, for the training parts of
development splits (default seeds 20-22; the report's seeds 10-14 are refused): it
reads no validation or test molecule. For each (set, split, seed) it prints the least
leave-one-out RMSE, in the target's units, of

* ``rbf``: ``exp(-gamma / F * |z - z'|^2)`` over the library's own grid (what runs use);
* ``rbf wider``: the same kernel over ``WIDER_GAMMAS``, the grid continued to larger
  gammas (narrower kernels), for splits whose choice sits at the grid's edge;
* ``laplacian``: ``exp(-gamma / F * |z - z'|_1)`` over ``LAPLACIAN_GAMMAS``, the same
  ridges;
* ``rbf or laplacian``: the lower of the two, a choice a run could make from its
  training part,

and the ratios to ``rbf``. A leave-one-out error is what the kernel ridge itself
minimises, so a kernel that lowers it is a candidate for a development rule judged on
validation parts; it is not itself such a judgement.

    python benchmarks/kernel_loo.py                       # FreeSolv, ESOL, Huuskonen
    python benchmarks/kernel_loo.py --datasets bace1 --seeds 20   # 4,591 molecules: minutes
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch
from molecule_sets import SETS, descriptors_of, load_set, report_seeds_among, split_labels
from util import print_table

from setattn.molprop.kernel import CLIP, GAMMAS, LAPLACIAN_GAMMAS, _loo_fits, _squared_distances
from setattn.molprop.model import target_scaling

WIDER_GAMMAS = (*GAMMAS, 2.0, 4.0)


def standardised(descriptors: torch.Tensor) -> torch.Tensor:
    """(M, F) float64 descriptors standardised and clipped as ``KernelRidge.fit`` does."""
    x = descriptors.double()  # (M, F)
    std = x.std(0).nan_to_num(1.0).clamp_min(1e-6)  # (F,)
    return ((x - x.mean(0)) / std).clamp(-CLIP, CLIP)  # (M, F)


def least_loo(distances: torch.Tensor, gammas: tuple[float, ...], y: torch.Tensor
              ) -> tuple[float, float, float]:
    """(loo_mse, gamma, ridge) of the least leave-one-out error of ``exp(-gamma / F * D)``
    over the gammas and the library's ridges.

    Args:
        distances: (M, M) float64 distances D already divided by F.
        gammas: the grid.
        y: (M,) float64 centred standardised targets.
    """
    best = (math.inf, 0.0, 0.0)
    for gamma in gammas:
        for mse, ridge, _ in _loo_fits(torch.exp(-gamma * distances), y):
            if mse < best[0]:
                best = (mse, gamma, ridge)
    return best


def training_part(smiles: list[str], kind: str, seed: int, descriptors: torch.Tensor,
                  values: list[float]) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Standardised (M, F) descriptors, (M,) centred standardised targets and the target
    scale of the labelled training molecules of one split of a set's molecules."""
    labels = split_labels(kind, smiles, seed)
    rows = [i for i, label in enumerate(labels) if label == "train" and not math.isnan(values[i])]
    y = torch.tensor([values[i] for i in rows], dtype=torch.float64)[:, None]  # (M, 1)
    mean, std = target_scaling(y)
    y = ((y - mean) / std)[:, 0]  # (M,)
    return standardised(descriptors[rows]), y - y.mean(), float(std[0])


def screen(name: str, kinds: list[str], seeds: list[int]) -> list[list[str]]:
    """Table rows of one set: its descriptors are computed once, then each split."""
    table = load_set(name)
    values = [float(c[0]) if c[0] else math.nan for c in table.cells]
    descriptors = descriptors_of(table.smiles, {})  # (N, F)
    rows = []
    for kind in kinds:
        for seed in seeds:
            z, y, scale = training_part(table.smiles, kind, seed, descriptors, values)
            f = z.shape[1]
            squared = _squared_distances(z, z) / f  # (M, M)
            fits = (least_loo(squared, GAMMAS, y), least_loo(squared, WIDER_GAMMAS, y),
                    least_loo(torch.cdist(z, z, p=1) / f, LAPLACIAN_GAMMAS, y))
            rmse = [math.sqrt(fit[0]) * scale for fit in fits]  # rbf, rbf wider, laplacian
            rows.append([name, kind, str(seed), f"{len(y):,}",
                         *[f"{r:.4f} ({fit[1]:g} / {fit[2]:g})" for r, fit in zip(rmse, fits)],
                         f"{min(rmse[0], rmse[2]):.4f}", f"{rmse[1] / rmse[0]:.3f}",
                         f"{rmse[2] / rmse[0]:.3f}"])
            print(" | ".join(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    regression = [n for n, s in SETS.items() if s.task == "regression"]
    parser.add_argument("--datasets", nargs="+", choices=regression,
                        default=["freesolv", "esol", "huuskonen"])
    parser.add_argument("--splits", nargs="+", choices=("random", "scaffold"),
                        default=["random", "scaffold"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[20, 21, 22])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    refusal = report_seeds_among(args.seeds)
    if refusal:
        parser.error(refusal)
    torch.set_num_threads(args.threads)
    rows = [row for name in args.datasets for row in screen(name, args.splits, args.seeds)]
    header = ["set", "split", "seed", "training molecules", "rbf LOO RMSE (gamma / ridge)",
              "rbf wider", "laplacian", "rbf or laplacian", "wider / rbf", "laplacian / rbf"]
    print_table(header, rows, markdown=True)
    for name in args.datasets:
        for kind in args.splits:
            mine = [r for r in rows if r[0] == name and r[1] == kind]
            wider, lap = ([float(r[k]) for r in mine] for k in (-2, -1))
            print(f"{name} {kind}: geometric means over {len(mine)} seeds: wider / rbf "
                  f"{statistics.geometric_mean(wider):.3f}, laplacian / rbf "
                  f"{statistics.geometric_mean(lap):.3f}")


if __name__ == "__main__":
    main()
