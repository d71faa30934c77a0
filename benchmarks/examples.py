"""Accuracy of the examples on real data, and the published CNN-rand reference on TREC.

Run:  .venv/bin/python benchmarks/examples.py                 (every example at its
          defaults, hours; writes results/examples.json)
      .venv/bin/python benchmarks/examples.py --only sets seq2seq --out x.json
      .venv/bin/python benchmarks/examples.py --cnn-rand --test --seeds 0 1 2 3 4
      .venv/bin/python benchmarks/examples.py --rebuild   (the record from its own rows)

Each example of ``EXAMPLES`` runs as its own process with the command its docstring
gives (``--out`` under ``--work``), one torch thread; the record keeps the line it ends
with (``result: ...``, the held-out accuracy, chosen on validation data only), the
published number it is set against, its wall time and the commit that ran it. Each row
is written to the record as its example finishes, in place of the row it reran; the
others are kept, and while one of them was made with other library code than HEAD's the
record names that row's commit, so that it reads as an earlier record.

``--cnn-rand`` runs the reference instead: Kim's CNN-rand under the protocol of
``examples/documents.py``, measured on the same folds, validation parts and words.
CNN-rand (Kim 2014, "Convolutional Neural Networks for Sentence Classification", EMNLP;
91.2 % on TREC's 500 test questions in the paper, one reading): word embeddings trained
from scratch (300-d, initialised uniform in +-0.25), 1-D convolutions of widths 3, 4
and 5 with 100 feature maps each, ReLU, max over time, dropout 0.5, a linear softmax
layer (initialised at zero, its rows, one per class, kept at L2 norm <= 3 after every
step); Adadelta (lr 1.0, rho 0.95, eps 1e-6), mini-batches of 50, 25 epochs, the
epoch with the best validation accuracy kept (the latest of equals, as Kim's code).
Every text is padded with 4 zero vectors (the pad embedding, never trained) on each
side, as Kim's code; batches are padded to their longest text (Kim: to the corpus's).

The same data as the attention model: ``setattn.domains.Tokenizer`` tokens (the first
100 of a text, no start token), the word vocabulary of the training part
(``Vocabulary``, min count 1; other words map to ``<unk>``, where Kim gave each unseen
word its own random vector), and EXACTLY the splits of ``documents.py``, imported from
``examples/documents_data.py``:

* default: ``--inner-folds 3`` of ``documents.py`` (seed 0): the 5452 training
  questions in 3 folds (1818, 1817, 1817), fold k held out in round k, 10 % of the
  rest the validation part that picks the epoch; the test questions are not loaded;
* ``--test``: the fixed split, training on the 5452 training questions (10 % of them,
  drawn with the model's seed as ``documents.py --seed S`` draws them, for the epoch)
  and one reading of the 500 test questions per seed. Reading the test set here chooses
  nothing: CNN-rand is a published model with published settings.

Prints a table: per seed the held-out questions right per fold and pooled over the
5452 (or the test questions right), the best epochs and the wall time; mean +- sample
standard deviation over the seeds.

    python benchmarks/examples.py --cnn-rand                   # inner folds, seed 0
    python benchmarks/examples.py --cnn-rand --test --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from documents_data import fixed_split, fold_indices, fold_split  # noqa: E402

from setattn.datasets import load_trec  # noqa: E402
from setattn.domains import Tokenizer, Vocabulary  # noqa: E402

from helpers.record import (  # noqa: E402
    RESULTS,
    ROOT,
    currency,
    finish,
    git_state,
    library_trees,
    make_record,
    table,
)

PAD = 4
"""Zero vectors on each side of a text (Kim: the widest filter minus one)."""


class CNNRand(nn.Module):
    """Embeddings -> convolutions of several widths -> ReLU, max over time -> dropout ->
    linear.

    Args:
        vocab: V (id 0 is the padding, a zero vector never trained).
        classes: C.
        dim: embedding width D.
        widths: filter widths.
        maps: feature maps per width F.
        dropout: on the pooled features.
    """

    def __init__(self, vocab: int, classes: int, dim: int = 300,
                 widths: tuple[int, ...] = (3, 4, 5), maps: int = 100, dropout: float = 0.5):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=Vocabulary.pad_id)
        with torch.no_grad():
            self.embed.weight.uniform_(-0.25, 0.25)
            self.embed.weight[Vocabulary.pad_id] = 0.0
        self.convs = nn.ModuleList(nn.Conv1d(dim, maps, w) for w in widths)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(maps * len(widths), classes)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, ids: Tensor) -> Tensor:
        """(B, T) padded word ids (T >= the widest filter) -> (B, C) logits."""
        x = self.embed(ids).transpose(1, 2)  # (B, D, T)
        pooled = torch.cat([conv(x).relu().amax(2) for conv in self.convs], 1)  # (B, F W)
        return self.out(self.drop(pooled))  # (B, C)


def pad_batch(rows: list[list[int]]) -> Tensor:
    """(B, T) word ids, every text with PAD zeros in front and at least PAD behind."""
    length = max(len(r) for r in rows) + 2 * PAD
    out = torch.zeros(len(rows), length, dtype=torch.long)  # (B, T)
    for i, r in enumerate(rows):
        out[i, PAD : PAD + len(r)] = torch.tensor(r, dtype=torch.long)
    return out


@torch.no_grad()
def predict(model: CNNRand, rows: list[list[int]], batch: int = 500) -> Tensor:
    """(M,) predicted classes of the texts ``rows``."""
    model.eval()
    out = torch.cat([model(pad_batch(rows[i : i + batch])).argmax(1)
                     for i in range(0, len(rows), batch)])
    model.train()
    return out


def max_norm_(weight: Tensor, limit: float = 3.0) -> None:
    """Scale the rows of ``weight`` (C, F) with L2 norm over ``limit`` back to it."""
    with torch.no_grad():
        weight.copy_(torch.renorm(weight, 2, 0, limit))


def train(rows: list[list[int]], y: Tensor, split: tuple[Tensor, Tensor, Tensor],
          vocab: int, classes: int, seed: int, epochs: int = 25, batch: int = 50
          ) -> tuple[int, int, float]:
    """Train CNN-rand on split[0], keep the best epoch on split[1], read split[2].

    Returns:
        Test (held-out) texts right, the best epoch (1-based), its validation accuracy.
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = CNNRand(vocab, classes)
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)
    train_i, val_i, test_i = (s.tolist() for s in split)
    val_rows, val_y = [rows[i] for i in val_i], y[val_i]
    best, best_epoch, best_state = -1.0, 0, None
    for epoch in range(1, epochs + 1):
        order = torch.tensor(train_i)[torch.randperm(len(train_i), generator=gen)]
        for chunk in order.split(batch):
            ids = pad_batch([rows[i] for i in chunk.tolist()])  # (B, T)
            loss = nn.functional.cross_entropy(model(ids), y[chunk])
            opt.zero_grad()
            loss.backward()
            opt.step()
            max_norm_(model.out.weight)
        acc = float((predict(model, val_rows) == val_y).float().mean())
        if acc >= best:  # Kim's code keeps the latest of equal validation epochs
            best, best_epoch = acc, epoch
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    right = int((predict(model, [rows[i] for i in test_i]) == y[test_i]).sum())
    return right, best_epoch, best


def encode_words(tokens: list[list[str]], train: Tensor) -> tuple[list[list[int]], int]:
    """Word ids of every text with the vocabulary of the training part ``train``."""
    vocab = Vocabulary.build([tokens[i] for i in train.tolist()], min_count=1)
    return [vocab.encode(t) for t in tokens], len(vocab)


def load(test: bool) -> tuple[list[list[str]], Tensor, int, Tensor | None]:
    """TREC's tokens (training questions, then with ``test`` the test questions), labels,
    classes and the test questions' indices (None without ``test``)."""
    tokenizer = Tokenizer()
    train = load_trec("train")
    texts, labels, fixed = train.texts, train.labels, None
    if test:
        held = load_trec("test")
        texts, labels = texts + held.texts, torch.cat([labels, held.labels])
        fixed = torch.arange(len(train.texts), len(texts))
    return [tokenizer(t)[:100] for t in texts], labels, len(train.classes), fixed


def inner_splits(num: int, folds: int, seed: int, val_fraction: float = 0.1
                 ) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The (train, validation, held-out) indices of ``documents.py --inner-folds``."""
    parts = fold_indices(num, folds, seed)
    return [fold_split(parts, k, val_fraction) for k in range(folds)]


def run_seed(tokens: list[list[str]], y: Tensor, classes: int, splits: list[tuple],
             seed: int) -> dict:
    """One seed over all splits: per split the texts right and the best epoch."""
    start = time.perf_counter()
    right, epochs = [], []
    for split in splits:
        rows, vocab = encode_words(tokens, split[0])
        r, epoch, _ = train(rows, y, split, vocab, classes, seed)
        right.append(r)
        epochs.append(epoch)
        print(f"  seed {seed} part {len(right) - 1}: {r} of {len(split[2])} right, "
              f"epoch {epoch}", flush=True)
    return {"right": right, "epochs": epochs, "seconds": time.perf_counter() - start}


def cnn_main(argv: list[str]) -> list[dict]:
    """The CNN-rand reference: its table, and a ``result:`` line as the examples end."""
    p = argparse.ArgumentParser(description="CNN-rand (Kim 2014) on TREC")
    p.add_argument("--cnn-rand", action="store_true")
    p.add_argument("--test", action="store_true", help="train on all training questions, "
                   "read the 500 test questions (default: --inner-folds of documents.py)")
    p.add_argument("--inner-folds", type=int, default=3, help="K of the inner folds")
    p.add_argument("--fold-seed", type=int, default=0, help="documents.py's --seed whose "
                   "inner folds to use")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="model seeds")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    tokens, y, classes, fixed = load(args.test)
    results = []
    for seed in args.seeds:
        splits = ([fixed_split(len(tokens), fixed, 0.1, seed)] if args.test else
                  inner_splits(len(tokens), args.inner_folds, args.fold_seed))
        results.append(run_seed(tokens, y, classes, splits, seed))
    sizes = [len(s[2]) for s in splits]
    total = sum(sizes)
    print(f"\nCNN-rand (Kim 2014), {'TREC test' if args.test else 'inner folds'}; "
          f"held-out sizes {sizes}")
    print("| seed | right per part | pooled | best epochs | seconds |")
    print("|---|---|---|---|---|")
    for seed, r in zip(args.seeds, results):
        pooled = sum(r["right"])
        print(f"| {seed} | {', '.join(map(str, r['right']))} | {pooled} of {total} "
              f"({100 * pooled / total:.2f} %) | {', '.join(map(str, r['epochs']))} | "
              f"{r['seconds']:.0f} |")
    acc = [100 * sum(r["right"]) / total for r in results]
    sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
    print(f"result: CNN-rand {'TREC test' if args.test else 'inner folds'} "
          f"{statistics.mean(acc):.2f} +- {sd:.2f} % over {len(acc)} seed(s)")
    return results


# --------------------------------------------------------------------------------------
# the examples

TREC = ("--corpus", "trec", "--radius", "-1", "--char-buckets", "16384", "--layers", "2",
        "--start-token", "--ngrams", "3", "--partner-ngrams", "3")
EXAMPLES: dict[str, tuple[str, tuple[str, ...], str]] = {
    # name: (script, options, the published number it is set against)
    "gat_cora": ("examples/gat_planetoid.py", (), "GAT 83.0 +- 0.7 % (Velickovic et al. 2018)"),
    "image_patches": ("examples/image_patches.py", (), "targets: digits 98 %, MNIST-5k 97 %"),
    "seq2seq": ("examples/seq2seq_attention.py", (), "target: 95 % exact match"),
    "sets": ("examples/sets.py", (), "Lee et al. 2019 (task style)"),
    "trec": ("examples/documents.py", TREC, "CNN-rand 91.2 % (Kim 2014)"),
    "cr": ("examples/documents.py", ("--corpus", "cr"),
           "CNN-rand 79.8 % (Kim 2014); NBSVM-bi 81.8 % (Wang & Manning 2012)"),
    "mr": ("examples/documents.py", ("--corpus", "mr"),
           "CNN-rand 76.1 % (Kim 2014); NBSVM-bi 79.4 % (Wang & Manning 2012)"),
    "cnn_rand_trec": ("benchmarks/examples.py", ("--cnn-rand", "--test", "--seeds", "0", "1",
                                                 "2", "3", "4"), "Kim 2014: 91.2 %, one run"),
}
COLUMNS = ["example", "command", "result", "published", "seconds", "commit"]


def command_of(name: str, work: Path, quick: bool = False) -> list[str]:
    """The command line of one example, its output under ``work`` (relative to the
    repository, where it runs, when ``work`` is inside it: the example prints that path
    into the result line the record keeps)."""
    script, options, _ = EXAMPLES[name]
    out = Path(work).resolve() / name
    if out.is_relative_to(ROOT):
        out = out.relative_to(ROOT)
    extra = [] if name == "cnn_rand_trec" else ["--out", str(out),
                                                *(["--quick"] if quick else [])]
    return [sys.executable, str(ROOT / script), *options, *extra]


def result_line(output: str) -> str:
    """The last ``result: ...`` line an example printed, without the prefix.

    Raises:
        ValueError: if it printed none.
    """
    found = [line[len("result:"):].strip() for line in output.splitlines()
             if line.startswith("result:")]
    if not found:
        raise ValueError("the example printed no 'result:' line")
    return found[-1]


def run_example(name: str, work: Path, commit: str, quick: bool = False) -> list[str]:
    """Run one example; its table row."""
    cmd = command_of(name, work, quick)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    script, options, published = EXAMPLES[name]
    shown = " ".join([".venv/bin/python", script, *options, *(["--quick"] if quick else [])])
    return [name, shown, result_line(done.stdout), published, f"{seconds:.0f}", commit[:7]]


def headline(result: str) -> str:
    """An example's result line without its closing parenthesis of particulars (seconds,
    folders), which may hold parentheses itself; parentheses inside the result stay."""
    if not result.endswith(")"):
        return result
    depth = 0
    for i in range(len(result) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(result[i], 0)
        if depth == 0:  # a parenthesis of particulars follows a space: "seed(s)" stays
            return result[:i].rstrip() if result[i - 1:i] == " " else result
    return result


def examples_record(rows: list[list[str]], threads: int = 1, **extra) -> dict:
    """The record of the examples' rows. Where a row was made with library code other
    than HEAD's, the record names that row's commit (and its code), so that it reads as
    an earlier record until every row is rerun."""
    text = ("Held-out accuracy of every example at its defaults on real data (choices made "
            "on validation data only), beside the published number each is set against: "
            + "; ".join(f"{r[0]} {headline(r[2])}" for r in rows) + ".")
    notes = ("result: the line the example ends with. seconds: wall time of the whole "
             "command on a shared machine (an upper bound). commit: the code that ran the "
             "row; rows rerun with --only replace theirs as each finishes.")
    record = make_record("examples", "Examples: accuracy on real data", text,
                         [table("the examples at their defaults", COLUMNS, rows, notes)],
                         threads, command=".venv/bin/python benchmarks/examples.py", **extra)
    stale = stale_row(rows)
    if stale is not None:
        record["commit"], record["library"] = full_commit(stale), library_trees("examples", stale)
    return record


def rebuilt(record: dict) -> dict:
    """``record`` made again from its own rows by today's code, its provenance (commit,
    date, machine, load, library) kept: the rows are the same runs."""
    new = examples_record(rows_of(record))
    for key in ("commit", "dirty", "date", "machine", "threads", "library"):
        if key in record:
            new[key] = record[key]
    return new


def full_commit(short: str) -> str:
    """The 40-digit hash git gives for ``short`` (``short`` itself where git cannot)."""
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{short}^{{commit}}"],
                          cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or short


def stale_row(rows: list[list[str]]) -> str | None:
    """The commit of the first row made with library code other than HEAD's (or at a
    commit git does not know); None when every row's code is HEAD's."""
    for row in rows:
        if currency({"benchmark": "examples", "commit": row[-1]}) != "current":
            return row[-1]
    return None


def merged(kept: list[list[str]], row: list[str]) -> list[list[str]]:
    """``kept`` with ``row`` in place of its example's row, in ``EXAMPLES``' order."""
    rows = {r[0]: r for r in kept}
    rows[row[0]] = row
    return [rows[name] for name in EXAMPLES if name in rows]


def read_record(path: Path) -> dict | None:
    """The examples record at ``path`` (None if there is none).

    Raises:
        ValueError: the file is another benchmark's record.
    """
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("benchmark") != "examples":
        raise ValueError(f"{path}: not an examples record (benchmark "
                         f"{record.get('benchmark')!r})")
    return record


def rows_of(record: dict) -> list[list[str]]:
    """The table rows of an examples record."""
    return [list(r) for t in record["tables"] for r in t["rows"]]


def kept_rows(path: Path) -> list[list[str]]:
    """The rows of the examples record at ``path`` (none if there is no such record)."""
    record = read_record(path)
    return [] if record is None else rows_of(record)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--cnn-rand" in argv:
        cnn_main(argv)
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=list(EXAMPLES), default=list(EXAMPLES))
    p.add_argument("--quick", action="store_true", help="each example's smoke test")
    p.add_argument("--work", type=Path, default=ROOT / "runs" / "bench_examples")
    p.add_argument("--out", type=Path, help="the record (default results/examples.json)")
    p.add_argument("--rebuild", action="store_true",
                   help="run nothing: write the record again from its own rows (after a "
                   "change to how the record is made from them)")
    args = p.parse_args(argv)
    out = args.out or RESULTS / "examples.json"
    if args.rebuild:
        record = read_record(out)
        if record is None:
            p.error(f"--rebuild: no examples record at {out}")
        finish(rebuilt(record), out)
        return
    # a smoke run (--quick) starts from nothing; a real one keeps the rows it does not rerun
    rows = [] if args.quick else kept_rows(out)
    commit = git_state()[0]
    for name in args.only:
        row = run_example(name, args.work, commit, args.quick)
        rows = merged(rows, row)
        print(f"{name}: {row[2]}", file=sys.stderr, flush=True)
        finish(examples_record(rows), out)  # each row lands as it finishes
    args.work.mkdir(parents=True, exist_ok=True)  # the CNN-rand row writes nothing there
    (args.work / "rows.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
