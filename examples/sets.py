"""Set Transformer vs sum pooling on generated set tasks (Lee et al. 2019, Zaheer et al. 2017).

Each example is a set of integer tokens in [0, V), stored PyG style: a flat (N,)
token vector and a (N,) ``batch`` vector saying which set each item belongs to.
Two tasks:

* ``max``:      predict the largest token of the set (V classes);
* ``distinct``: predict how many different tokens the set holds (1 .. max size).

Two models see the same token embeddings:

* Set Transformer: SAB -> ISAB (induced points) -> PMA (one seed) -> linear;
* Deep Sets baseline: per-item MLP -> sum pooling -> MLP.

Fresh random sets are drawn at every step; accuracy is measured on a fixed held-out
set of sets. Writes ``metrics.json`` to ``--out``.

    python examples/sets.py --quick --out runs/sets
"""

from __future__ import annotations

import argparse
import time

import torch
from common import add_run_options, new_parser, start_run, write_metrics
from torch import Tensor, nn
from torch_geometric.nn import global_add_pool
from tqdm import tqdm

from setattn.nn import ISAB, PMA, SAB


def make_sets(num_sets: int, vocab: int, min_size: int, max_size: int,
              gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random sets: tokens (N,) in [0, vocab) and batch (N,) sorted set index."""
    sizes = torch.randint(min_size, max_size + 1, (num_sets,), generator=gen)  # (G,)
    batch = torch.repeat_interleave(torch.arange(num_sets), sizes)  # (N,)
    tokens = torch.randint(0, vocab, (int(sizes.sum()),), generator=gen)  # (N,)
    return tokens, batch


def labels(task: str, tokens: Tensor, batch: Tensor, num_sets: int, vocab: int) -> Tensor:
    """(G,) class of every set for ``task``."""
    if task == "max":
        out = torch.full((num_sets,), -1, dtype=torch.long)
        return out.scatter_reduce(0, batch, tokens, "amax")
    if task == "distinct":
        present = torch.zeros(num_sets, vocab, dtype=torch.bool)
        present[batch, tokens] = True
        return present.sum(1)
    raise ValueError(f"unknown task {task!r}")


class SetTransformer(nn.Module):
    """Embedding -> SAB -> ISAB -> PMA(1) -> linear: (N,) tokens + batch -> (G, C)."""

    def __init__(self, vocab: int, classes: int, dim: int = 64, heads: int = 4,
                 inducing: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.sab = SAB(dim, heads)
        self.isab = ISAB(dim, heads, num_inducing=inducing)
        self.pool = PMA(dim, heads, num_seeds=1)
        self.out = nn.Linear(dim, classes)

    def forward(self, tokens: Tensor, batch: Tensor, num_sets: int) -> Tensor:
        x = self.embed(tokens)  # (N, D)
        x = self.isab(self.sab(x, batch, num_graphs=num_sets), batch, num_graphs=num_sets)
        return self.out(self.pool(x, batch, num_graphs=num_sets)[:, 0])  # (G, C)


class DeepSets(nn.Module):
    """Embedding -> MLP -> sum pooling -> MLP: the permutation-invariant baseline."""

    def __init__(self, vocab: int, classes: int, dim: int = 64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.phi = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU())
        self.rho = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, classes))

    def forward(self, tokens: Tensor, batch: Tensor, num_sets: int) -> Tensor:
        x = self.phi(self.embed(tokens))  # (N, D)
        return self.rho(global_add_pool(x, batch, size=num_sets))  # (G, C)


def accuracy(model: nn.Module, data: tuple[Tensor, Tensor, Tensor], num_sets: int) -> float:
    tokens, batch, y = data
    model.eval()
    with torch.no_grad():
        pred = model(tokens, batch, num_sets).argmax(1)
    model.train()
    return float((pred == y).float().mean())


def train_one(model: nn.Module, task: str, args: argparse.Namespace, gen: torch.Generator,
              test: tuple[Tensor, Tensor, Tensor], bar: tqdm) -> float:
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for _ in range(args.steps):
        tokens, batch = make_sets(args.batch_size, args.vocab, args.min_size, args.max_size, gen)
        y = labels(task, tokens, batch, args.batch_size, args.vocab)
        loss = nn.functional.cross_entropy(model(tokens, batch, args.batch_size), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        bar.set_postfix(task=task, model=type(model).__name__, loss=f"{loss.item():.3f}")
        bar.update(1)
    return accuracy(model, test, args.test_sets)


def majority_accuracy(y: Tensor) -> float:
    """Accuracy of always predicting the most common label of ``y``: the best an
    input-blind guess can do on these sets."""
    return float(torch.bincount(y).max()) / max(len(y), 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = new_parser(__doc__)
    p.add_argument("--tasks", nargs="+", default=["max", "distinct"],
                   choices=["max", "distinct"], help="set tasks to run")
    p.add_argument("--steps", type=int, default=1500, help="training steps per model and task")
    p.add_argument("--batch-size", type=int, default=64, help="sets per step")
    p.add_argument("--vocab", type=int, default=30, help="tokens are in [0, vocab)")
    p.add_argument("--min-size", type=int, default=2, help="smallest set")
    p.add_argument("--max-size", type=int, default=20, help="largest set")
    p.add_argument("--dim", type=int, default=64, help="model width")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    p.add_argument("--test-sets", type=int, default=1000, help="held-out sets per task")
    add_run_options(p, "runs/sets",
                    threads_help="torch CPU threads (these tensors are small: one thread is "
                    "fastest)", quick_help="about 20 s: 250 steps, small sets and models")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.batch_size, args.test_sets = 250, 32, 500
        args.max_size, args.dim = 8, 32
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    gen = start_run(args)
    start = time.perf_counter()
    results: dict[str, dict[str, float]] = {}
    majority: dict[str, float] = {}
    bar = tqdm(total=2 * len(args.tasks) * args.steps, desc="sets", unit="step")
    for task in args.tasks:
        classes = args.vocab if task == "max" else args.max_size + 1
        tokens, batch = make_sets(args.test_sets, args.vocab, args.min_size, args.max_size, gen)
        test = (tokens, batch, labels(task, tokens, batch, args.test_sets, args.vocab))
        models = {"set_transformer": SetTransformer(args.vocab, classes, args.dim),
                  "sum_pooling": DeepSets(args.vocab, classes, args.dim)}
        results[task] = {name: train_one(m, task, args, gen, test, bar)
                         for name, m in models.items()}
        majority[task] = majority_accuracy(test[2])
    bar.close()
    metrics = write_metrics({"accuracy": results, "majority_class_accuracy": majority}, args,
                            start)
    for task, r in results.items():
        print(f"{task:9s} accuracy: set transformer {r['set_transformer']:.3f}   "
              f"sum pooling {r['sum_pooling']:.3f}")
    summary = "; ".join(f"{t}: set transformer {r['set_transformer']:.3f} vs sum pooling "
                        f"{r['sum_pooling']:.3f}" for t, r in results.items())
    print(f"result: {summary} (metrics in {args.out / 'metrics.json'})")
    return metrics


if __name__ == "__main__":
    main()
