"""Kim's CNN-rand on TREC under the protocol of ``examples/documents.py``: a published
reference, measured on the same folds, validation parts and words.

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

    python benchmarks/trec_cnn.py                    # inner folds, seed 0
    python benchmarks/trec_cnn.py --test --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from documents_data import fixed_split, fold_indices, fold_split  # noqa: E402

from setattn.datasets import load_trec  # noqa: E402
from setattn.domains import Tokenizer, Vocabulary  # noqa: E402

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


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
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
    print(f"mean {statistics.mean(acc):.2f} +- {sd:.2f} % over {len(acc)} seed(s)")
    return results


if __name__ == "__main__":
    main()
