"""How fast could an attention network of setattn's default shape train? A bound.

Issue 15 asks for training throughput >= 2x chemprop's at matched width (width 96).
This measures how much of setattn's training step the attention itself costs, by
swapping it out, and sets the result beside chemprop at width 96 on the same molecules.

In-process cases, each a full training step (forward, backward, AdamW) of
``MoleculeModel`` at width 96, 4 heads, 3 layers (the default up to session 15) and RDKit
descriptors over the same batches of 64 training molecules, one torch thread, the rounds
interleaved so that a shared machine's drifting load hits every case alike
(``util.interleaved_seconds``):

* ``gatv2``: that network (GATv2 layers, the default up to session 11);
* ``gat``: the same with GAT (v1) layers (``MoleculeModelConfig(conv="gat")``), whose
  scores are per-node terms instead of a LeakyReLU over every edge;
* ``gatv2 no scores``, ``gat no scores``: every layer's attention swapped for a plain sum
  over the same edges of the same projections (``SumOverEdges``): the layer keeps its
  projections and its gather and scatter over the edges, and computes no score, softmax
  or weighting. An attention layer of that shape does at least this work, so its
  throughput bounds what an optimised attention kernel could reach.

Then the command lines, as ``benchmarks/molecules.py`` times them (molecules x epochs /
seconds of training with its validation passes), in turn ``--rounds`` times for
``--epochs`` epochs each on one split of the same CSV, one thread each: ``setattn train
--ensemble-size 1 --kernel-ridge off --conv gatv2 --layers 3`` (the network alone, as on
classification sets), the same with ``--conv gat``, and chemprop 2.3.1 at width 96
(``--message-hidden-dim 96 --ffn-hidden-dim 96``). The last column of the first table
carries each in-process case over to the command line: its throughput relative to
``gatv2``, times ``setattn train``'s ratio to chemprop.

    python benchmarks/throughput_bound.py
    python benchmarks/throughput_bound.py --dataset esol --molecules 1000 --epochs 4

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
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chemprop_anchor  # noqa: E402
from molecule_sets import SETS, MoleculeTable, load_set, split_labels, write_csv  # noqa: E402
from util import interleaved_seconds, load_average, print_table  # noqa: E402

from setattn.cli.process import keep_freed_memory  # noqa: E402
from setattn.domains.descriptors import descriptor_count  # noqa: E402
from setattn.molprop.batching import PackedMolecules  # noqa: E402
from setattn.molprop.featurize import featurize_csv  # noqa: E402
from setattn.molprop.metrics import masked_loss  # noqa: E402
from setattn.molprop.model import MoleculeModel, MoleculeModelConfig  # noqa: E402
from setattn.nn import GATConv, GATv2Conv  # noqa: E402

BATCH = 64
LAYERS = 3  # the network these cases measure (the default up to session 15)


class SumOverEdges(nn.Module):
    """A graph attention layer's projections summed over its edges, with no attention.

    For a ``GATv2Conv``, ``out_i = W_r x_i + sum_{j -> i} (W_l x_j + W_e e_ij) + b``; for a
    ``GATConv``, whose edge features enter only its scores, ``out_i = sum_{j -> i} W x_j
    + b``. The same parameters and linear work as the wrapped layer's messages and the
    same gather / scatter over the edges, but no score, softmax or weighting.
    """

    def __init__(self, conv: GATConv | GATv2Conv) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        """x (N, D), edge_index (2, E), edge_attr (E, F_bond) -> (N, D)."""
        c = self.conv
        src, dst = edge_index
        if isinstance(c, GATConv):
            xs = c.lin(x)  # (N, D)
            return xs.new_zeros(xs.shape).index_add_(0, dst, xs.index_select(0, src)) + c.bias
        msg = c.lin_l(x).index_select(0, src) + c.lin_edge(edge_attr)  # (E, D)
        return c.lin_r(x).index_add(0, dst, msg) + c.bias  # (N, D)


def build(case: str, descriptor_dim: int) -> MoleculeModel:
    """The model of an in-process case, seeded alike."""
    torch.manual_seed(0)
    config = MoleculeModelConfig(descriptor_dim=descriptor_dim, conv=case.split()[0],
                                 layers=LAYERS)
    model = MoleculeModel(config)
    if case.endswith("no scores"):
        model.convs = nn.ModuleList([SumOverEdges(c) for c in model.convs])
    return model


def one_thread_split(dataset: str, molecules: int | None) -> tuple[MoleculeTable, list[str]]:
    """One torch thread and the command line's allocator setting for this process; the
    first ``molecules`` molecules of ``dataset`` (None: all) and their random split of
    seed 0 (a part name per molecule), announced with the load average."""
    torch.set_num_threads(1)
    keep_freed_memory()  # as the command line does
    full = load_set(dataset)
    last = molecules or len(full.smiles)
    table = MoleculeTable(full.smiles[:last], full.cells[:last])
    labels = split_labels("random", table.smiles, 0)
    print(f"{dataset}: {len(table.smiles)} molecules, random split seed 0; "
          f"load average {load_average()}", flush=True)
    return table, labels


def epoch_fn(model: MoleculeModel, packed: PackedMolecules, train: list, batch: int = BATCH):
    """A function running one epoch of training steps of ``model`` over ``packed``, in
    batches of ``batch`` molecules."""
    model.fit_scaling(torch.cat([d.y for d in train]),
                      torch.cat([d.descriptors for d in train]))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    order = torch.randperm(len(packed), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[i:i + batch] for i in range(0, len(order), batch)]

    def run() -> None:
        for indices in batches:
            batch = packed.batch(indices)
            loss = masked_loss(model(batch), model.scale_targets(batch.y), "regression")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return run


def setattn_cli(csv: Path, targets: tuple[str, ...], out: Path, epochs: int,
                conv: str) -> float:
    """Training molecules per second of ``setattn train --conv conv`` (one model, the
    network alone: no kernel ridge, whose closed-form fit would count as training time;
    one thread)."""
    exe = Path(sys.executable).parent / "setattn"
    cmd = [str(exe), "train", "--data", str(csv), "--smiles-column", "smiles",
           "--target-columns", *targets, "--split", "column", "--split-column", "split",
           "--epochs", str(epochs), "--ensemble-size", "1", "--kernel-ridge", "off",
           "--conv", conv, "--layers", str(LAYERS), "--num-threads", "1",
           "--output-dir", str(out)]
    chemprop_anchor.timed(cmd, out.parent / f"{out.name}.log", 1, SETATTN_CACHE_DIR="off")
    metrics = json.loads((out / "metrics.json").read_text())
    done = sum(m["epochs_run"] for m in metrics["models"])
    return metrics["split"]["train"] * done / metrics["train_seconds"]


def chemprop_cli(csv: Path, targets: tuple[str, ...], out: Path, epochs: int,
                 n_train: int) -> float:
    """Training molecules per second of chemprop at width 96 (one thread)."""
    flags = [*chemprop_anchor.ANCHORS["chemprop_w96"], "--epochs", str(epochs)]
    result, _, _ = chemprop_anchor.run_chemprop(csv, "split", targets, "regression", out, 0,
                                                1, flags)
    return n_train * result["epochs"] / result["fit_seconds"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="bace1",
                        choices=[n for n, s in SETS.items() if s.task == "regression"])
    parser.add_argument("--molecules", type=int, default=None,
                        help="the first this many molecules of the set (default: all), "
                        "split 80/10/10")
    parser.add_argument("--repeats", type=int, default=5, help="in-process rounds")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each command run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each command")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the CSV, runs and logs in this folder (default: a "
                        "temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    if args.epochs < 3:  # chemprop refuses as many epochs as its 2 warm-up epochs
        parser.error(f"argument --epochs: must be >= 3 (chemprop warms up for 2), got "
                     f"{args.epochs}")
    spec = SETS[args.dataset]
    table, labels = one_thread_split(args.dataset, args.molecules)
    with tempfile.TemporaryDirectory(prefix="setattn_bound_") as scratch:
        tmp = args.keep or Path(scratch)
        csv = write_csv(tmp / "data.csv", table, spec.targets, {"split": labels})
        dim = descriptor_count()
        data = featurize_csv(csv, "smiles", list(spec.targets), dim, use_cache=False).data
        train = [d for d in data if labels[d.row] == "train"]
        packed = PackedMolecules(train)
        cases = ("gatv2", "gatv2 no scores", "gat", "gat no scores")
        models = {c: build(c, dim) for c in cases}
        seconds = interleaved_seconds(
            {c: epoch_fn(models[c], packed, train) for c in cases}, args.repeats)
        cli: dict[str, list[float]] = {"setattn train": [], "setattn train --conv gat": [],
                                       "chemprop, width 96": []}
        for r in range(args.rounds):
            for conv, name in (("gatv2", "setattn train"), ("gat", "setattn train --conv gat")):
                cli[name].append(
                    setattn_cli(csv, spec.targets, tmp / f"{conv}{r}", args.epochs, conv))
            cli["chemprop, width 96"].append(chemprop_cli(
                csv, spec.targets, tmp / f"chemprop{r}", args.epochs, len(train)))
    speed = {c: len(train) / s for c, s in seconds.items()}
    cli_speed = {name: statistics.median(v) for name, v in cli.items()}
    carry = cli_speed["setattn train"] / cli_speed["chemprop, width 96"]
    print(f"\ntraining steps, {len(train)} molecules in batches of {BATCH}, "
          f"median of {args.repeats} interleaved epochs, 1 thread")
    print_table(["case", "parameters", "mol/s", "vs gatv2", "estimated vs chemprop width 96"],
                [[c, f"{sum(p.numel() for p in models[c].parameters()):,}",
                  f"{speed[c]:.0f}", f"{speed[c] / speed['gatv2']:.2f}x",
                  f"{speed[c] / speed['gatv2'] * carry:.2f}x"] for c in cases])
    print(f"\ncommand lines, {args.epochs} epochs, median of {args.rounds} alternating runs, "
          f"1 thread")
    print_table(["tool", "train mol/s (each run)", "median", "vs chemprop width 96"],
                [[name, " ".join(f"{x:.0f}" for x in v), f"{cli_speed[name]:.0f}",
                  f"{cli_speed[name] / cli_speed['chemprop, width 96']:.2f}x"]
                 for name, v in cli.items()])
    print(f"\nload average {load_average()}; {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
