"""Training speed of network shapes against the 3-layer network, in one process.

Issue 15 asks for training throughput >= 2x chemprop's at matched width (width 96);
measured in turn (``matched_width.md``), the network of 3 graph attention layers (the
default up to session 15) trains at 1.18-1.62x. This measures how much faster a network
with fewer graph attention layers or fewer heads than that one (3 layers, 4 heads) would
train, so that a development rule can name a candidate that could reach 2x before any
validation run is made. It measures speed only; whether a shape predicts as
well is for the development seeds (``molecules_dev.md``).

Each case is a full training step (forward, backward, AdamW) of ``MoleculeModel`` at
width 96 with RDKit descriptors over the same batches of 64 training molecules (random
split seed 0), one torch thread, the epochs of all cases interleaved so that a shared
machine's drifting load hits every case alike (``util.interleaved_seconds``). The last
column carries each case's speed-up over to the command line: times the median of the
per-round ratios of ``setattn train`` (3 layers) to chemprop at width 96 measured in turn
on the same set (``matched_width.json``), where that set has such rounds.

    python benchmarks/network_speed.py
    python benchmarks/network_speed.py --dataset esol --repeats 7
    python benchmarks/network_speed.py --dataset freesolv --batch-sizes 64 96 128

Timings depend on the machine and its load (printed); they are not pass/fail.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from molecule_acceptance import by_round  # noqa: E402
from molecule_sets import SETS, write_csv  # noqa: E402
from throughput_bound import epoch_fn, one_thread_split  # noqa: E402
from util import interleaved_seconds, load_average, print_table  # noqa: E402

from setattn.domains.descriptors import descriptor_count  # noqa: E402
from setattn.molprop.batching import PackedMolecules  # noqa: E402
from setattn.molprop.featurize import featurize_csv  # noqa: E402
from setattn.molprop.model import MoleculeModel, MoleculeModelConfig  # noqa: E402

IN_TURN = Path(__file__).resolve().parent / "results" / "matched_width.json"

CASES: dict[str, dict[str, int]] = {
    "3 layers, 4 heads": {"layers": 3},
    "2 layers, 4 heads": {"layers": 2},
    "3 layers, 2 heads": {"layers": 3, "heads": 2},
    "3 layers, 1 head": {"layers": 3, "heads": 1},
    "2 layers, 2 heads": {"layers": 2, "heads": 2},
    "2 layers, 1 head": {"layers": 2, "heads": 1},
    "1 layer, 4 heads (the default since session 16)": {"layers": 1},
    "0 layers (no graph layer: a bound)": {"layers": 0},
}
"""Each case's ``MoleculeModelConfig`` settings besides the defaults. The first is the
network ``matched_width.json`` measured in turn (the default up to session 15), the one
every case is compared with. ``0 layers`` keeps only the atom embedding, the readout and
the head: no network with graph attention layers trains faster, so its speed-up bounds
what any choice of layers and heads can buy."""


def in_turn_ratio(records: list[dict], dataset: str) -> float | None:
    """Median over rounds and splits of setattn's training molecules/s over chemprop at
    width 96's, from ``matched_width.py --save`` records (None where the set has none).
    The records must all be of one setattn network (``matched_width.json``: 3 layers)."""
    ratios = [tools["setattn"]["mol_per_s"] / tools["chemprop_w96"]["mol_per_s"]
              for key, tools in by_round(records).items()
              if key[0] == dataset and "setattn" in tools and "chemprop_w96" in tools]
    return statistics.median(ratios) if ratios else None


def build(settings: dict[str, int], descriptor_dim: int) -> MoleculeModel:
    """A case's model, seeded alike."""
    torch.manual_seed(0)
    return MoleculeModel(MoleculeModelConfig(descriptor_dim=descriptor_dim, **settings))


def batch_speed(sizes: list[int], packed: PackedMolecules, train: list, dim: int,
                repeats: int) -> None:
    """Print the default network's training speed at each batch size of ``sizes``
    against the first, epochs of all sizes interleaved (one model per size, seeded
    alike)."""
    names = [f"batch {b}" for b in sizes]
    seconds = interleaved_seconds(
        {name: epoch_fn(build({}, dim), packed, train, b) for name, b in zip(names, sizes)},
        repeats)
    base = seconds[names[0]]
    print(f"\ntraining steps of the default network, {len(train)} molecules, median of "
          f"{repeats} interleaved epochs, 1 thread")
    print_table(["case", "steps per epoch", "mol/s", f"vs {names[0]}"],
                [[name, -(-len(train) // b), f"{len(train) / seconds[name]:.0f}",
                  f"{base / seconds[name]:.2f}x"] for name, b in zip(names, sizes)])
    print(f"\nload average {load_average()}; {time.strftime('%Y-%m-%d %H:%M')}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="bace1",
                        choices=[n for n, s in SETS.items() if s.task == "regression"])
    parser.add_argument("--molecules", type=int, default=None,
                        help="the first this many molecules of the set (default: all)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved epochs per case")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=None, metavar="N",
                        help="time the default network at these batch sizes instead of "
                        "the shapes (the first is the one compared with)")
    parser.add_argument("--in-turn", type=Path, default=IN_TURN, metavar="FILE",
                        help="matched_width.py --save records (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"argument --repeats: must be >= 1, got {args.repeats}")
    if args.batch_sizes and min(args.batch_sizes) < 1:
        parser.error(f"argument --batch-sizes: must be >= 1, got {min(args.batch_sizes)}")
    spec = SETS[args.dataset]
    table, labels = one_thread_split(args.dataset, args.molecules)
    dim = descriptor_count()
    with tempfile.TemporaryDirectory(prefix="setattn_speed_") as scratch:
        csv = write_csv(Path(scratch) / "data.csv", table, spec.targets, {"split": labels})
        data = featurize_csv(csv, "smiles", list(spec.targets), dim, use_cache=False).data
    train = [d for d in data if labels[d.row] == "train"]
    packed = PackedMolecules(train)
    if args.batch_sizes:
        batch_speed(args.batch_sizes, packed, train, dim, args.repeats)
        return
    models = {name: build(settings, dim) for name, settings in CASES.items()}
    seconds = interleaved_seconds(
        {name: epoch_fn(models[name], packed, train) for name in CASES}, args.repeats)
    records = json.loads(args.in_turn.read_text()) if args.in_turn.exists() else []
    carry = in_turn_ratio(records, args.dataset)
    base = seconds[next(iter(CASES))]
    print(f"\ntraining steps, {len(train)} molecules in batches of 64, median of "
          f"{args.repeats} interleaved epochs, 1 thread")
    print_table(["case", "parameters", "mol/s", "vs 3 layers",
                 "estimated vs chemprop width 96"],
                [[name, f"{sum(p.numel() for p in models[name].parameters()):,}",
                  f"{len(train) / s:.0f}", f"{base / s:.2f}x",
                  f"{base / s * carry:.2f}x" if carry else "no in-turn rounds"]
                 for name, s in seconds.items()])
    if carry:
        print(f"(setattn train with 3 layers ran at {carry:.2f}x chemprop at width 96 in turn "
              f"on {args.dataset}: median of the rounds in {args.in_turn.name})")
    print(f"\nload average {load_average()}; {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
