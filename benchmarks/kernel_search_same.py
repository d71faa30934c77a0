"""Does the kernel ridge's search choose the same gamma and ridge in two versions of
``setattn/molprop/kernel.py``?

Report run 4 (``results/molecules_report4.md``) carries run 3's records over on the
small regression sets, whose kernel ridge was fitted by the code at ``589346a``; since
then ``_loo_fits`` computes the leave-one-out search in another order (``f44575e``).
This script takes the fitted kernel ridges saved in a benchmark's run folder
(``model_0/best.pt``: standardised descriptors ``centres``, dual weights ``alpha``,
the chosen ``gamma`` and ``ridge``), recovers the centred training targets as
``(K + ridge I) alpha``, runs both versions' searches on them and prints, per run, the
choice stored and the choice of each version, and the largest relative difference of
any leave-one-out error or dual weight between the versions. Trains nothing.

    python benchmarks/kernel_search_same.py --old ../wt-report3/setattn/molprop/kernel.py \\
        --runs runs/report3_small
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

import torch
from util import print_table

from setattn.molprop import kernel as current


def _module(path: Path) -> ModuleType:
    """The kernel module at ``path``, loaded under its own name."""
    spec = importlib.util.spec_from_file_location("kernel_other", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _best(fits: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(gamma, ridge) of the least leave-one-out error among (mse, gamma, ridge)."""
    return min(fits)[1:]


def compare(state: dict, old: ModuleType) -> tuple[tuple, tuple, tuple, float]:
    """Stored, old and current choice (gamma, ridge) of one saved kernel ridge (first
    task), and the largest relative difference between the versions' searches."""
    z, alpha = state["kernel.centres"].double(), state["kernel.alpha"].double()  # (M, F), (M, T)
    gamma, ridge = float(state["kernel.gamma"]), float(state["kernel.ridge"])
    f = z.shape[1]
    distances = current._squared_distances(z, z)  # (M, M)
    eye = torch.eye(len(z), dtype=torch.float64)
    y = ((torch.exp(-gamma / f * distances) + ridge * eye) @ alpha)[:, 0]  # (M,) centred
    worst, before, now = 0.0, [], []
    for g in current.GAMMAS:
        kernel = torch.exp(-g / f * distances)  # (M, M)
        for (mse_a, r, a), (mse_b, _, b) in zip(old._loo_fits(kernel, y),
                                                current._loo_fits(kernel, y)):
            before.append((mse_a, g, r))
            now.append((mse_b, g, r))
            worst = max(worst, abs(mse_a - mse_b) / mse_a,
                        float((a - b).abs().max() / a.abs().max()))
    return (gamma, ridge), _best(before), _best(now), worst


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the other kernel.py")
    parser.add_argument("--runs", type=Path, required=True,
                        help="a benchmarks/molecules.py --out folder")
    args = parser.parse_args(argv)
    old = _module(args.old)
    if (old.GAMMAS, old.RIDGES) != (current.GAMMAS, current.RIDGES):
        parser.error(f"argument --old: {args.old} searches another grid; this script "
                     f"compares the same grid searched two ways")
    rows, worst = [], 0.0
    for path in sorted(args.runs.glob("*/*/setattn/model_0/best.pt")):
        state = torch.load(path, weights_only=True)["state_dict"]
        if "kernel.centres" not in state:
            continue
        if float(state.get("kernel.norm", current.RBF)) != current.RBF:
            raise SystemExit(f"{path}: a Laplacian kernel ridge; this script compares "
                             f"RBF searches only")
        stored, before, now, diff = compare(state, old)
        worst = max(worst, diff)
        rows.append([path.parts[-5], path.parts[-4], len(state["kernel.centres"]),
                     stored, before, now, "yes" if stored == before == now else "NO"])
    print_table(["set", "run", "M", "stored", "old search", "current search", "same"], rows)
    print(f"{len(rows)} kernel ridges; largest relative difference of a leave-one-out "
          f"error or dual weight between the versions: {worst:.1e}")


if __name__ == "__main__":
    main()
