"""Sentence classification: word sets, local self-attention and attention pooling.

Every sentence is a set of word nodes (tokens with their positions, as
``setattn.domains.document_to_data`` makes them), batched PyG style: flat (N,) nodes
and (G + 1,) offsets ``ptr``. The model, trained from scratch (no pretrained vectors):

* node features: a learned word embedding plus a linear map of the naive-Bayes
  log-count ratios (Wang & Manning 2012) of the word and of the n-grams starting at it
  (``--ngrams 2``: the bigram "w_i w_i+1"), counted on the training sentences only, a
  training sentence leaving itself out; plus weak sinusoidal position encodings;
* a transformer block whose attention runs over a ``window`` topology: word i attends
  to the words at most ``--radius`` positions away in its own sentence (local
  intra-attention; ``--radius -1`` uses the ``complete`` topology, all pairs), with a
  learned bias per head and relative offset passed to the engine as a per-edge ``bias``;
* global attention pooling: a learned query per head attends to the words of each
  sentence (Yang et al. 2016); its weights are the shading of the word pictures;
* dropout and a linear classifier.

Regularisation for a small data set: small width, dropout on the node features and on
the pooled vector, training words replaced by ``<unk>`` at random (``--word-dropout``),
weight decay, early stopping on a validation slice. ``--ensemble M`` trains M models
per round from different seeds and averages their probabilities (``metrics.json``
reports the ensemble and the single models). ``--no-ratios`` leaves the ratio features
out (word embeddings only), for comparison.

Evaluation protocol: ``--folds K`` splits the data at random (seeded by ``--seed``)
into K folds; fold k is the test set of round k; of the rest ``--val-fraction``
(10 %) is held out for choosing each model's epoch, and the others are trained on;
vocabularies and ratios come from that training part only. ``--run-folds R`` runs the
first R rounds (all K by default: K-fold cross-validation as in the MR literature;
``--run-folds 1`` is one fixed 90/10 split). The metric is test accuracy, mean and
standard deviation over the rounds run.

Data: MR (rt-polarity, Pang & Lee 2005) by default; any CSV with
``--data FILE --text-column TEXT --label-column LABEL``.

    python examples/documents.py --out runs/documents
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from common import add_run_options, new_parser, print_result, start_run, write_metrics
from torch import Tensor, nn
from tqdm import tqdm

import setattn
from setattn.datasets import load_mr, load_text_csv
from setattn.domains import Tokenizer, Vocabulary
from setattn.nn import GlobalAttentionPool, SinusoidalEncoding, TransformerBlock, set_positions
from setattn.topology import Topology, complete, ptr_from_sizes, window
from setattn.viz import plot_word_weights, words_to_html


class RelativePositionBias(nn.Module):
    """A learned logit per head and relative offset j - i (Shaw et al. 2018; T5, Raffel
    et al. 2020): lets a head look at "the previous word" or "the next word", so local
    attention can compose phrases as a convolution would.

    Args:
        heads: H.
        max_offset: offsets beyond +-max_offset share the bias of the largest one.
    """

    def __init__(self, heads: int, max_offset: int):
        super().__init__()
        self.max_offset = max_offset
        self.table = nn.Parameter(torch.zeros(2 * max_offset + 1, heads))  # (2R + 1, H)

    def forward(self, topology: Topology) -> Tensor:
        """(E, H) bias in the topology's canonical edge order."""
        src, dst = topology.edge_index()  # (E,), (E,): node ids, sentence by sentence
        offset = (src - dst).clamp(-self.max_offset, self.max_offset) + self.max_offset
        return self.table[offset]  # (E, H)


class DocumentClassifier(nn.Module):
    """Word embeddings + n-gram ratios -> local transformer blocks -> attention pooling
    -> linear.

    Args:
        vocab: word vocabulary size V.
        classes: C.
        dim: D.
        heads: attention heads of the blocks and of the pooling.
        layers: transformer blocks.
        radius: window half-width r of the intra-attention; -1 for all pairs.
        dropout: on the embeddings and on the pooled vector.
        attn_dropout: inside the blocks (attention weights and residual branches).
        embed_std: standard deviation of the initial embeddings.
        pe_scale: weight of the sinusoidal position encodings (0: none).
        ratio_features: R, log-count ratios per node (0: none).
    """

    def __init__(self, vocab: int, classes: int, dim: int = 32, heads: int = 4,
                 layers: int = 1, radius: int = 2, dropout: float = 0.5,
                 attn_dropout: float = 0.1, embed_std: float = 0.02, pe_scale: float = 0.02,
                 ratio_features: int = 0):
        super().__init__()
        self.radius, self.pe_scale = radius, pe_scale
        self.embed = nn.Embedding(vocab, dim)
        nn.init.normal_(self.embed.weight, std=embed_std)
        self.ratios = nn.Linear(ratio_features, dim) if ratio_features else None
        self.position = SinusoidalEncoding(dim)
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, ff_dim=2 * dim,
                                                     dropout=attn_dropout)
                                    for _ in range(layers))
        max_offset = radius if radius >= 0 else 8
        self.biases = nn.ModuleList(RelativePositionBias(heads, max_offset)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.pool = GlobalAttentionPool(dim, heads)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(dim, classes)

    def topology(self, ptr: Tensor) -> Topology:
        """Who attends to whom inside each sentence."""
        return complete(ptr) if self.radius < 0 else window(ptr, self.radius)

    def forward(self, ids: Tensor, ratios: Tensor, ptr: Tensor) -> Tensor:
        """(N, K) node feature ids (column 0: the word) and (N, R) log-count ratios of G
        sentences with offsets ptr (G + 1,) -> (G, C) logits."""
        x = self.embed(ids[:, 0])  # (N, D)
        if self.ratios is not None:
            x = x + self.ratios(ratios)  # (N, D)
        pos = self.position(set_positions(ptr))  # (N, D)
        x = self.drop(x) + self.pe_scale * pos  # (N, D)
        top = self.topology(ptr)
        for block, bias in zip(self.blocks, self.biases):
            x = block(x, top, bias=bias(top))  # (N, D)
        pooled = self.pool(self.norm(x), ptr=ptr)  # (G, D)
        return self.out(self.drop(pooled))  # (G, C)


# ---------------------------------------------------------------------------------------
# data


@dataclass
class Encoded:
    """Sentences as one flat table of word nodes.

    Attributes:
        ids: (N, K) per word node its word id, then the ids of the n-grams starting there.
        ratios: (N, K * C) naive-Bayes log-count ratios of those K features, one per class
            (``log_count_ratios``).
        ptr: (M + 1,) offsets of the M sentences.
        y: (M,) class labels.
    """

    ids: Tensor
    ratios: Tensor
    ptr: Tensor
    y: Tensor

    def __len__(self) -> int:
        return self.y.numel()

    def select(self, index: Tensor) -> Encoded:
        """The sentences ``index`` (M',) as a new table, in that order."""
        start, sizes = self.ptr[index], self.ptr[index + 1] - self.ptr[index]  # (M',), (M',)
        ptr = ptr_from_sizes(sizes)  # (M' + 1,)
        shift = torch.repeat_interleave(start - ptr[:-1], sizes)  # (N',)
        rows = torch.arange(int(ptr[-1])) + shift  # (N',) node rows in self
        return Encoded(self.ids[rows], self.ratios[rows], ptr, self.y[index])


def load_texts(args: argparse.Namespace) -> tuple[list[str], Tensor, list[str]]:
    """Texts, (M,) labels and class names, from MR or from ``--data``."""
    if args.data is None:
        texts, labels, classes = load_mr()
    else:
        texts, labels, classes = load_text_csv(args.data, args.text_column, args.label_column)
    if args.limit:
        keep = torch.randperm(len(texts), generator=torch.Generator().manual_seed(args.seed))
        keep = keep[: args.limit].sort().values
        texts, labels = [texts[i] for i in keep], labels[keep]
    return texts, labels, classes


def fold_indices(num: int, folds: int, seed: int) -> list[Tensor]:
    """A seeded random partition of range(num) into ``folds`` parts of near-equal size."""
    if not 2 <= folds <= num:
        raise ValueError(f"argument --folds must be between 2 and the {num} texts, got {folds}")
    perm = torch.randperm(num, generator=torch.Generator().manual_seed(seed))
    return list(perm.tensor_split(folds))


def fold_split(folds: list[Tensor], k: int, val_fraction: float
               ) -> tuple[Tensor, Tensor, Tensor]:
    """(train, validation, test) indices of round k: fold k is the test part, and the
    first ``val_fraction`` of the other folds' texts the validation part."""
    rest = torch.cat([f for i, f in enumerate(folds) if i != k])
    n_val = int(val_fraction * len(rest))
    return rest[n_val:], rest[:n_val], folds[k]


def ngrams(tokens: list[str], n: int) -> list[str]:
    """The n-gram starting at each token (padded with ``</s>`` at the end)."""
    padded = tokens + ["</s>"] * (n - 1)
    return [" ".join(padded[i : i + n]) for i in range(len(tokens))]


def build_vocabularies(tokens: list[list[str]], max_n: int, min_count: int,
                       ngram_min_count: int) -> list[Vocabulary]:
    """Vocabularies of the words and of the 2- .. max_n-grams of the training sentences."""
    vocabs = [Vocabulary.build(tokens, min_count=min_count)]
    for n in range(2, max_n + 1):
        vocabs.append(Vocabulary.build((ngrams(t, n) for t in tokens),
                                       min_count=ngram_min_count))
    return vocabs


def encode(tokens: list[list[str]], labels: Tensor, vocabs: list[Vocabulary]) -> Encoded:
    """Sentences -> ``Encoded``; unknown words get ``<unk>``, unknown n-grams id 0."""
    columns = []
    for n, vocab in enumerate(vocabs, start=1):
        flat = [i for t in tokens for i in vocab.encode(t if n == 1 else ngrams(t, n))]
        ids = torch.tensor(flat, dtype=torch.long)  # (N,)
        columns.append(ids if n == 1 else ids.masked_fill(ids == Vocabulary.unk_id, 0))
    ptr = ptr_from_sizes(torch.tensor([len(t) for t in tokens], dtype=torch.long))
    ids = torch.stack(columns, 1)  # (N, K)
    return Encoded(ids, torch.zeros(ids.shape[0], 0), ptr, labels)  # no ratios yet


def log_count_ratios(data: Encoded, train: Tensor, classes: int, alpha: float = 1.0) -> Tensor:
    """Naive-Bayes log-count ratios of every node feature (Wang & Manning 2012).

    For feature f (a word or n-gram) and class c, ``r_c(f) = log p(f | c) - log p(f | not
    c)`` with p(f | c) = (sentences of class c containing f + alpha) / (their total +
    alpha V). Counts come from the training sentences only; a training sentence does not
    count itself (leave-one-out), so its ratios are as informative as a test sentence's.

    Args:
        data: the sentences.
        train: (M,) bool, the training sentences.
        classes: C.
        alpha: additive smoothing.

    Returns:
        (N, K * C) ratios; 0 for words and n-grams in no (other) training sentence.
    """
    sizes = data.ptr[1:] - data.ptr[:-1]  # (M,)
    sentence = torch.repeat_interleave(torch.arange(len(data)), sizes)  # (N,)
    node_y, node_train = data.y[sentence], train[sentence]  # (N,), (N,)
    out = []
    for k in range(data.ids.shape[1]):
        ids = data.ids[:, k]  # (N,)
        known = ids > Vocabulary.unk_id if k == 0 else ids > 0  # (N,)
        vocab = int(ids.max()) + 1
        # each (training sentence, feature) pair counts once
        pairs = torch.unique(sentence[node_train & known] * vocab + ids[node_train & known])
        counts = torch.zeros(classes, vocab)  # (C, V)
        counts.index_put_((data.y[pairs // vocab], pairs % vocab), torch.ones(pairs.numel()),
                          accumulate=True)
        own = counts[:, ids].T.clone()  # (N, C)
        own[node_train, node_y[node_train]] -= 1  # leave the sentence itself out
        other = (counts.sum(0)[ids] - node_train.float())[:, None] - own  # (N, C)
        total = counts.sum(1)  # (C,)
        p = (own + alpha) / (total + alpha * vocab)  # (N, C)
        q = (other + alpha) / (total.sum() - total + alpha * vocab)  # (N, C)
        seen = known & (own.sum(1) > 0)  # (N,): in another training sentence
        out.append(torch.where(seen[:, None], p.log() - q.log(), 0.0))  # (N, C)
    return torch.cat(out, 1)  # (N, K * C)


def batches(data: Encoded, batch_size: int, gen: torch.Generator | None) -> list[Encoded]:
    """Batches of ``data``, shuffled when ``gen`` is given."""
    order = torch.randperm(len(data), generator=gen) if gen is not None else torch.arange(
        len(data))
    return [data.select(chunk) for chunk in order.split(batch_size)]


# ---------------------------------------------------------------------------------------
# training and evaluation


def word_dropout(ids: Tensor, p: float) -> Tensor:
    """Replace each word (column 0 of ids (N, K)) by ``<unk>`` with probability p."""
    if p <= 0:
        return ids
    words = ids[:, 0].masked_fill(torch.rand(ids.shape[0]) < p, Vocabulary.unk_id)  # (N,)
    return torch.cat([words[:, None], ids[:, 1:]], 1)  # (N, K)


@torch.no_grad()
def probabilities(models: list[nn.Module], data: Encoded, batch_size: int = 1000) -> Tensor:
    """(M, C) class probabilities, averaged over the models (an ensemble of one or more)."""
    for model in models:
        model.eval()
    out = []
    for b in batches(data, batch_size, None):
        probs = sum(model(b.ids, b.ratios, b.ptr).softmax(1) for model in models)  # (G, C)
        out.append(probs / len(models))
    for model in models:
        model.train()
    return torch.cat(out)


def accuracy(models: list[nn.Module], data: Encoded) -> float:
    """Accuracy of the models' averaged probabilities."""
    return float((probabilities(models, data).argmax(1) == data.y).float().mean())


def train_model(model: nn.Module, train: Encoded, val: Encoded, args: argparse.Namespace,
                gen: torch.Generator, bar: tqdm) -> tuple[float, int]:
    """Train for ``args.epochs``, keep the weights of the best validation epoch.

    Returns:
        The best validation accuracy and its epoch (1-based).
    """
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps = args.epochs * math.ceil(len(train) / args.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=steps,
                                                pct_start=0.1)
    best, best_epoch, best_state = -1.0, 0, None
    for epoch in range(1, args.epochs + 1):
        for b in batches(train, args.batch_size, gen):
            ids = word_dropout(b.ids, args.word_dropout)  # (N, K)
            loss = nn.functional.cross_entropy(model(ids, b.ratios, b.ptr), b.y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{best:.3f}", refresh=False)
            bar.update(1)
        acc = accuracy([model], val) if len(val) else float(epoch)  # no validation: last
        if acc > best:
            best, best_epoch = acc, epoch
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    return best, best_epoch


@torch.no_grad()
def pooling_weights(models: list[DocumentClassifier], data: Encoded) -> list[Tensor]:
    """Per sentence its (N_g,) pooling weights, averaged over heads and models."""
    total = 0
    for model in models:
        model.eval()
        with setattn.capture() as captured:
            model(data.ids, data.ratios, data.ptr)
        model.train()
        # edges word j -> sentence g, target-major: the words of each sentence in order
        total = total + captured["pool"].weights.mean(1)  # (N,)
    w = total / len(models)  # (N,)
    return [w[data.ptr[g] : data.ptr[g + 1]] for g in range(len(data))]


def draw_sentences(models: list[DocumentClassifier], data: Encoded,
                   tokens: list[list[str]], classes: list[str], out: Path, count: int
                   ) -> list[Path]:
    """HTML page and PNG of ``count`` test sentences shaded by their pooling weights."""
    chosen = [i for i, t in enumerate(tokens) if 6 <= len(t) <= 30][:count]
    if not chosen:
        return []
    subset = data.select(torch.tensor(chosen))
    weights, probs = pooling_weights(models, subset), probabilities(models, subset)
    sentences = []
    for i, w, p, truth in zip(chosen, weights, probs, subset.y.tolist()):
        pred = int(p.argmax())
        mark = "correct" if pred == truth else "wrong"
        caption = f"true: {classes[truth]}, predicted: {classes[pred]} (p={p[pred]:.2f}, {mark})"
        sentences.append((tokens[i][: w.numel()], w, caption))
    title = "test sentences, words shaded by their attention-pooling weight"
    if len(models) > 1:
        title += f" (mean over {len(models)} models)"
    return [words_to_html(sentences, out / "sentences.html", title=title),
            plot_word_weights(sentences, out / "sentences.png", title=title)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = new_parser(__doc__)
    p.add_argument("--data", type=Path, default=None,
                   help="a CSV file with a header line (MR when omitted)")
    p.add_argument("--text-column", default="text", help="text column of --data")
    p.add_argument("--label-column", default="label", help="label column of --data")
    p.add_argument("--limit", type=int, default=0, help="use a random subset of this many "
                   "texts (0: all)")
    p.add_argument("--folds", type=int, default=10, help="K of the K-fold protocol")
    p.add_argument("--run-folds", type=int, default=0, help="rounds to run (0: all K)")
    p.add_argument("--epochs", type=int, default=6, help="epochs per model")
    p.add_argument("--val-fraction", type=float, default=0.1, help="share of the training "
                   "part held out to pick the best epoch (0: train on all, keep the last)")
    p.add_argument("--ensemble", type=int, default=3, help="models per round (different "
                   "seeds; their probabilities are averaged)")
    p.add_argument("--batch-size", type=int, default=100, help="sentences per step")
    p.add_argument("--ngrams", type=int, default=2, help="n-gram features up to this n "
                   "(1: words only)")
    p.add_argument("--no-ratios", action="store_true", help="no log-count ratio features "
                   "(the nodes carry their word embedding only)")
    p.add_argument("--dim", type=int, default=32, help="embedding and model width")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--layers", type=int, default=1, help="transformer blocks")
    p.add_argument("--radius", type=int, default=2,
                   help="intra-attention window half-width (-1: all pairs)")
    p.add_argument("--dropout", type=float, default=0.5, help="embedding / output dropout")
    p.add_argument("--word-dropout", type=float, default=0.3, help="p of replacing a "
                   "training word by <unk>")
    p.add_argument("--embed-std", type=float, default=0.02, help="initial embedding scale")
    p.add_argument("--pe-scale", type=float, default=0.02, help="position encoding weight")
    p.add_argument("--min-count", type=int, default=1, help="word vocabulary: minimum count")
    p.add_argument("--ngram-min-count", type=int, default=1,
                   help="n-gram vocabularies: minimum count")
    p.add_argument("--max-length", type=int, default=100, help="tokens kept per text")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (AdamW)")
    p.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay")
    p.add_argument("--pictures", type=int, default=10, help="test sentences to draw")
    add_run_options(p, "runs/documents", seed_help="random seed (folds and model)")
    args = p.parse_args(argv)
    if args.quick:
        args.limit, args.run_folds, args.epochs, args.dim = 1500, 1, 2, 16
        args.ensemble, args.pictures = 2, 6
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    gen = start_run(args)
    start = time.perf_counter()
    texts, labels, classes = load_texts(args)
    tokenizer = Tokenizer()
    tokens = [tokenizer(t)[: args.max_length] for t in texts]
    folds = fold_indices(len(texts), args.folds, args.seed)
    rounds = args.run_folds or args.folds

    parts = [fold_split(folds, k, args.val_fraction) for k in range(rounds)]
    steps = args.ensemble * args.epochs * sum(math.ceil(len(train_idx) / args.batch_size)
                                              for train_idx, _, _ in parts)
    bar = tqdm(total=steps, desc="documents", unit="step")
    results, pictures = [], []
    for k, (train_idx, val_idx, test_idx) in enumerate(parts):
        vocabs = build_vocabularies([tokens[i] for i in train_idx], args.ngrams,
                                    args.min_count, args.ngram_min_count)
        data = encode(tokens, labels, vocabs)
        if not args.no_ratios:
            in_train = torch.zeros(len(data), dtype=torch.bool)
            in_train[train_idx] = True
            data.ratios = log_count_ratios(data, in_train, len(classes))  # (N, K * C)
        train, val, test = data.select(train_idx), data.select(val_idx), data.select(test_idx)
        models, records = [], []
        for _ in range(args.ensemble):
            model = DocumentClassifier(len(vocabs[0]), len(classes), args.dim, args.heads,
                                       args.layers, args.radius, args.dropout,
                                       embed_std=args.embed_std, pe_scale=args.pe_scale,
                                       ratio_features=data.ratios.shape[1])
            val_acc, epoch = train_model(model, train, val, args, gen, bar)
            models.append(model)
            records.append({"val_accuracy": val_acc, "best_epoch": epoch,
                            "test_accuracy": accuracy([model], test)})
        test_acc = accuracy(models, test)
        single = sum(r["test_accuracy"] for r in records) / len(records)
        results.append({"fold": k, "test_accuracy": test_acc, "single_model_mean": single,
                        "members": records, "train": len(train), "val": len(val),
                        "test": len(test), "vocabulary": [len(v) for v in vocabs]})
        tqdm.write(f"fold {k}: test accuracy {test_acc:.4f} ({len(models)} model(s); "
                   f"single models {single:.4f} on average)")
        if k == 0:
            pictures = draw_sentences(models, test, [tokens[i] for i in test_idx], classes,
                                      args.out, args.pictures)
    bar.close()
    accs = torch.tensor([r["test_accuracy"] for r in results])
    mean, std = float(accs.mean()), float(accs.std()) if len(accs) > 1 else 0.0
    protocol = (f"{args.folds}-fold cross-validation" if rounds == args.folds else
                f"first {rounds} of {args.folds} folds (test {100 / args.folds:.0f} %)")
    metrics = write_metrics({
        "data": str(args.data) if args.data else "MR (rt-polarity)",
        "protocol": protocol,
        "test_accuracy_mean": mean,
        "test_accuracy_std": std,
        "single_model_mean": float(torch.tensor([r["single_model_mean"] for r in results])
                                   .mean()),
        "ensemble": args.ensemble,
        "folds": results,
        "classes": classes,
        "pictures": [p.name for p in pictures],
    }, args, start)
    print_result(f"{metrics['data']} test accuracy {100 * mean:.2f} +- {100 * std:.2f} %",
                 metrics, args.out, detail=protocol)
    return metrics


if __name__ == "__main__":
    main()
