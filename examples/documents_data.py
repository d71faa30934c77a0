"""Data of examples/documents.py: corpora, splits, word / n-gram encodings and
naive-Bayes log-count ratios.

Corpora: ``mr`` (MR, 10662 movie-review sentences, 2 classes), ``cr`` (CR, 3775
customer-review sentences, 2 classes), ``trec`` (TREC question type, 5452 + 500
questions, 6 classes, a fixed test split) or any CSV file.

Splits: a corpus with a fixed test split (TREC) has one round, its test split; the
others are split at random into K folds, fold k being the test part of round k. For
model selection on TREC (``--inner-folds K``) the test split is not even loaded: the
training questions alone are split into K folds, fold k held out in round k. In
every round the first ``val_fraction`` of the (shuffled) rest is the validation part,
on which everything is chosen (epochs, C, ensemble weight), and the others are the
training part. The test part is used for the reported accuracy only.
"""

from __future__ import annotations

import argparse
import zlib
from dataclasses import dataclass

import torch
from torch import Tensor

from setattn.datasets import load_cr, load_mr, load_text_csv, load_trec
from setattn.domains import Vocabulary
from setattn.topology import ptr_from_sizes

CORPORA = ("mr", "cr", "trec")
"""Bundled corpora ``--corpus`` takes."""


@dataclass
class Corpus:
    """Texts with labels and the test parts of the evaluation rounds.

    Attributes:
        name: what the result line calls the data.
        texts: the M raw texts.
        labels: (M,) class indices.
        classes: class names.
        fixed_test: (M_test,) indices of a fixed test split, or None (K-fold rounds).
    """

    name: str
    texts: list[str]
    labels: Tensor
    classes: list[str]
    fixed_test: Tensor | None = None


def load_corpus(args: argparse.Namespace) -> Corpus:
    """The corpus of ``--corpus`` or ``--data`` (a random ``--limit`` subset if given)."""
    if args.data is not None:
        texts, labels, classes = load_text_csv(args.data, args.text_column, args.label_column)
        corpus = Corpus(str(args.data), texts, labels, classes)
    elif args.corpus == "trec" and args.inner_folds:  # model selection: no test split
        train = load_trec("train")
        corpus = Corpus("TREC training questions", train.texts, train.labels, train.classes)
    elif args.corpus == "trec":
        train, test = load_trec("train"), load_trec("test")
        corpus = Corpus("TREC", train.texts + test.texts,
                        torch.cat([train.labels, test.labels]), train.classes,
                        torch.arange(len(train.texts), len(train.texts) + len(test.texts)))
    else:
        texts, labels, classes = load_cr() if args.corpus == "cr" else load_mr()
        corpus = Corpus({"cr": "CR", "mr": "MR (rt-polarity)"}[args.corpus], texts, labels,
                        classes)
    if args.limit and args.limit < len(corpus.texts):
        keep = torch.randperm(len(corpus.texts),
                              generator=torch.Generator().manual_seed(args.seed))
        keep = keep[: args.limit].sort().values  # (L,)
        fixed = None
        if corpus.fixed_test is not None:  # new positions of the kept test texts
            is_test = torch.zeros(len(corpus.texts), dtype=torch.bool)
            is_test[corpus.fixed_test] = True
            fixed = is_test[keep].nonzero().flatten()
        corpus = Corpus(corpus.name, [corpus.texts[i] for i in keep], corpus.labels[keep],
                        corpus.classes, fixed)
    return corpus


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


def fixed_split(num: int, test: Tensor, val_fraction: float, seed: int
                ) -> tuple[Tensor, Tensor, Tensor]:
    """(train, validation, test) indices with a fixed test part: the validation part is a
    seeded random ``val_fraction`` of the other texts."""
    is_test = torch.zeros(num, dtype=torch.bool)
    is_test[test] = True
    rest = (~is_test).nonzero().flatten()  # (M - M_test,)
    rest = rest[torch.randperm(len(rest), generator=torch.Generator().manual_seed(seed))]
    n_val = int(val_fraction * len(rest))
    return rest[n_val:], rest[:n_val], test


def splits(corpus: Corpus, args: argparse.Namespace) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The (train, validation, test) indices of every round run."""
    num = len(corpus.texts)
    if corpus.fixed_test is not None:
        return [fixed_split(num, corpus.fixed_test, args.val_fraction, args.seed)]
    k_folds = args.inner_folds or args.folds
    folds = fold_indices(num, k_folds, args.seed)
    return [fold_split(folds, k, args.val_fraction) for k in range(args.run_folds or k_folds)]


@dataclass
class Encoded:
    """Sentences as one flat table of word nodes.

    Attributes:
        ids: (N, K) per word node its word id, then the ids of the n-grams starting there.
        ratios: (N, K * C) naive-Bayes log-count ratios of those K features, one per class
            (``log_count_ratios``).
        ptr: (M + 1,) offsets of the M sentences.
        y: (M,) class labels.
        chars: (N, L) hashed character n-gram ids of each word (``char_ngram_ids``; 0:
            padding), or (N, 0) without them.
    """

    ids: Tensor
    ratios: Tensor
    ptr: Tensor
    y: Tensor
    chars: Tensor

    def __len__(self) -> int:
        return self.y.numel()

    def select(self, index: Tensor) -> Encoded:
        """The sentences ``index`` (M',) as a new table, in that order."""
        start, sizes = self.ptr[index], self.ptr[index + 1] - self.ptr[index]  # (M',), (M',)
        ptr = ptr_from_sizes(sizes)  # (M' + 1,)
        shift = torch.repeat_interleave(start - ptr[:-1], sizes)  # (N',)
        rows = torch.arange(int(ptr[-1])) + shift  # (N',) node rows in self
        return Encoded(self.ids[rows], self.ratios[rows], ptr, self.y[index], self.chars[rows])


START = "<s>"
"""The start-of-text token of ``mark_start``."""


def mark_start(tokens: list[list[str]]) -> list[list[str]]:
    """Every text with ``<s>`` in front: its first words become features of their own
    ("<s> how", "<s> who"; in the attention model a node at position 0 they can attend
    to), where the opening of a short text decides much of its class."""
    return [[START, *t] for t in tokens]


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


def char_ngram_ids(tokens: list[list[str]], buckets: int, length: int = 24) -> Tensor:
    """(N, L) per token the hashed ids (1 .. buckets - 1) of its character 3- to 5-grams
    (of "<token>", as fastText; Bojanowski et al. 2017), the first ``length`` of them,
    0-padded: every word, seen in training or not, gets features from its spelling."""
    cache: dict[str, list[int]] = {}
    rows = []
    for token in (t for sentence in tokens for t in sentence):
        if token not in cache:
            word = f"<{token}>"
            grams = [word[i : i + n] for n in (3, 4, 5) for i in range(len(word) - n + 1)]
            ids = [1 + zlib.crc32(g.encode()) % (buckets - 1) for g in grams[:length]]
            cache[token] = ids + [0] * (length - len(ids))
        rows.append(cache[token])
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), length)  # (N, L)


def encode(tokens: list[list[str]], labels: Tensor, vocabs: list[Vocabulary],
           char_buckets: int = 0) -> Encoded:
    """Sentences -> ``Encoded``; unknown words get ``<unk>``, unknown n-grams id 0;
    character n-grams hashed into ``char_buckets`` (0: none)."""
    columns = []
    for n, vocab in enumerate(vocabs, start=1):
        flat = [i for t in tokens for i in vocab.encode(t if n == 1 else ngrams(t, n))]
        ids = torch.tensor(flat, dtype=torch.long)  # (N,)
        columns.append(ids if n == 1 else ids.masked_fill(ids == Vocabulary.unk_id, 0))
    ptr = ptr_from_sizes(torch.tensor([len(t) for t in tokens], dtype=torch.long))
    ids = torch.stack(columns, 1)  # (N, K)
    chars = (char_ngram_ids(tokens, char_buckets) if char_buckets else
             torch.zeros(ids.shape[0], 0, dtype=torch.long))  # (N, L)
    return Encoded(ids, torch.zeros(ids.shape[0], 0), ptr, labels, chars)  # no ratios yet


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




def encode_round(tokens: list[list[str]], labels: Tensor, train: Tensor, classes: int,
                 args: argparse.Namespace) -> tuple[Encoded, list[Vocabulary]]:
    """All sentences encoded with vocabularies (and ratios) of the training part ``train``.

    Returns:
        The ``Encoded`` sentences and the vocabularies (words, then n-grams).
    """
    vocabs = build_vocabularies([tokens[i] for i in train.tolist()], args.ngrams,
                                args.min_count, args.ngram_min_count)
    data = encode(tokens, labels, vocabs, args.char_buckets)
    if not args.no_ratios:
        in_train = torch.zeros(len(data), dtype=torch.bool)
        in_train[train] = True
        data.ratios = log_count_ratios(data, in_train, classes)  # (N, K * C)
    return data, vocabs
