"""Written dates to ISO dates with a GRU encoder-decoder and additive (Bahdanau) attention.

A generated translation-like task: the source is a date written in one of several
human formats ("saturday, march 14, 1998", "14.03.98", "Mar 14 1998", ...), the
target is its ISO form "1998-03-14". Characters are the tokens on both sides.

The model is the one of Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by
Jointly Learning to Align and Translate", at a small size:

* encoder: character embeddings -> bidirectional GRU; its states h_j are the items of
  one set per sentence (flat (N, D) rows with set offsets ``ptr``, PyG style);
* decoder: a GRU cell; before emitting output token t, its previous state s_{t-1}
  attends to the encoder states of its own sentence,
  ``e_tj = v^T tanh(W s_{t-1} + U h_j)`` (``scores.Additive``), ``c_t = sum_j p_tj h_j``:
  one ``setattn.attend`` call over a ``bipartite`` topology (query t of sentence g ->
  the items of sentence g); then ``s_t = GRU([y_{t-1}; c_t], s_{t-1})`` and
  ``y_t = softmax(W_o [s_t; c_t])``.

The calendar days 1950-2049 are partitioned at random (``--seed``) into training,
validation and test days: no validation or test date is a training target, in any
wording. Trained with teacher forcing, decoded greedily; after every epoch the model is
scored on the validation dates and the weights of the best epoch are evaluated once on
the test dates. The metric is exact match of the whole ISO string. The picture is the
alignment heatmap, output characters x input characters, like Bahdanau's Figure 3.

    python examples/seq2seq_attention.py --out runs/seq2seq
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time
from collections import Counter
from pathlib import Path

import torch
from common import add_run_options, new_parser, print_result, start_run, write_metrics
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from tqdm import tqdm

import setattn
from setattn import scores
from setattn.topology import ptr_from_sizes
from setattn.viz import plot_alignment

MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
FIRST_DAY = dt.date(1950, 1, 1)
NUM_DAYS = (dt.date(2049, 12, 31) - FIRST_DAY).days + 1  # two-digit years stay unambiguous

PAD, BOS, EOS = 0, 1, 2  # special ids of both vocabularies
TARGET_CHARS = "0123456789-"
TARGET_LEN = 10  # "yyyy-mm-dd"


# ---------------------------------------------------------------------------------------
# data


def write_date(date: dt.date, rng: random.Random) -> str:
    """One human way of writing ``date``, drawn at random (English names, any case)."""
    d, m, y = date.day, date.month, date.year
    month, weekday = MONTHS[m - 1], WEEKDAYS[date.weekday()]
    formats = [
        f"{d} {month} {y}",
        f"{month} {d}, {y}",
        f"{weekday}, {month} {d}, {y}",
        f"{weekday} {d} {month} {y}",
        f"{d} {month[:3]} {y}",
        f"{month[:3]} {d} {y % 100:02d}",
        f"{d:02d}.{m:02d}.{y}",
        f"{d:02d}.{m:02d}.{y % 100:02d}",
        f"{d}-{month[:3]}-{y}",
        f"{y}/{m:02d}/{d:02d}",
        f"the {d}{_ordinal_suffix(d)} of {month} {y}",
    ]
    text = rng.choice(formats)
    case = rng.random()
    if case < 0.15:
        return text.upper()
    if case < 0.45:  # capitalised words ("March 14, 1998"; str.title would give "14Th")
        return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))
    return text


def _ordinal_suffix(day: int) -> str:
    """"st", "nd", "rd" or "th" for a day of the month."""
    if day in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def split_days(num_val: int, num_test: int, rng: random.Random
               ) -> tuple[list[int], list[int], list[int]]:
    """Partition the calendar days (offsets from FIRST_DAY) into train / validation / test.

    A date of the validation or test part is never a training target, in any wording.
    """
    days = list(range(NUM_DAYS))
    rng.shuffle(days)
    return days[num_val + num_test :], days[:num_val], days[num_val : num_val + num_test]


def make_pairs(num: int, days: list[int], rng: random.Random, distinct_dates: bool = False
               ) -> list[tuple[str, str]]:
    """``num`` (written date, ISO date) pairs with distinct sources, dates drawn from ``days``.

    Args:
        num: pairs wanted.
        days: the calendar days (offsets from FIRST_DAY) to draw from.
        rng: the random source (dates and wordings).
        distinct_dates: every date at most once (one wording each), as for evaluation.
    """
    if num > (len(days) if distinct_dates else 11 * len(days)):
        raise ValueError(f"cannot draw {num} pairs from {len(days)} days")
    if distinct_dates:
        return [_pair(FIRST_DAY + dt.timedelta(days=d), rng) for d in rng.sample(days, num)]
    seen: set[str] = set()
    pairs = []
    while len(pairs) < num:
        source, target = _pair(FIRST_DAY + dt.timedelta(days=rng.choice(days)), rng)
        if source not in seen:
            seen.add(source)
            pairs.append((source, target))
    return pairs


def _pair(date: dt.date, rng: random.Random) -> tuple[str, str]:
    """One random wording of ``date`` and its ISO form."""
    return write_date(date, rng), date.isoformat()


class CharVocab:
    """Characters <-> ids, with PAD = 0, BOS = 1, EOS = 2."""

    def __init__(self, chars: str):
        self.itos = ["<pad>", "<s>", "</s>"] + sorted(set(chars))
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        return [self.stoi[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.itos[i] for i in ids if i > EOS)


def encode_batch(pairs: list[tuple[str, str]], src_vocab: CharVocab, tgt_vocab: CharVocab
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """Padded ids: sources (B, Ts), lengths (B,), targets (B, TARGET_LEN + 1) ending in EOS."""
    lengths = torch.tensor([len(s) for s, _ in pairs])  # (B,)
    src = torch.full((len(pairs), int(lengths.max())), PAD, dtype=torch.long)  # (B, Ts)
    for b, (s, _) in enumerate(pairs):
        src[b, : len(s)] = torch.tensor(src_vocab.encode(s))
    tgt = torch.tensor([tgt_vocab.encode(t) + [EOS] for _, t in pairs])  # (B, T + 1)
    return src, lengths, tgt


# ---------------------------------------------------------------------------------------
# model


class Encoder(nn.Module):
    """Characters -> bidirectional GRU states, returned as flat set items."""

    def __init__(self, vocab: int, emb: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.gru = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)

    def forward(self, src: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, Ts), lengths (B,) -> items (N, 2 hidden), N = lengths.sum(), and ptr (B + 1,)."""
        packed = pack_padded_sequence(self.embed(src), lengths, batch_first=True,
                                      enforce_sorted=False)
        states, _ = pad_packed_sequence(self.gru(packed)[0], batch_first=True)  # (B, Ts, 2h)
        valid = torch.arange(states.shape[1])[None, :] < lengths[:, None]  # (B, Ts)
        return states[valid], ptr_from_sizes(lengths)  # (N, 2h) row-major: sentence by sentence


class AttentionDecoder(nn.Module):
    """GRU decoder whose state attends to the encoder items with an additive score."""

    def __init__(self, vocab: int, emb: int, enc_dim: int, hidden: int, att_hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.init = nn.Linear(enc_dim, hidden)
        self.score = scores.Additive(1, hidden, enc_dim, hidden=att_hidden)
        self.cell = nn.GRUCell(emb + enc_dim, hidden)
        self.out = nn.Linear(hidden + enc_dim, vocab)

    def initial_state(self, items: Tensor, ptr: Tensor) -> Tensor:
        """s_0 = tanh(W mean_j h_j): (N, E) items -> (B, hidden)."""
        sizes = (ptr[1:] - ptr[:-1]).clamp_min(1)  # (B,)
        batch = torch.repeat_interleave(torch.arange(sizes.numel()), ptr[1:] - ptr[:-1])  # (N,)
        mean = torch.zeros(sizes.numel(), items.shape[1]).index_add_(0, batch, items)
        return torch.tanh(self.init(mean / sizes[:, None]))  # (B, hidden)

    def step(self, prev: Tensor, state: Tensor, items: Tensor, ptr: Tensor,
             weights: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
        """One output token.

        Args:
            prev: (B,) previous output ids.
            state: (B, hidden) s_{t-1}.
            items: (N, E) encoder states of all B sentences.
            ptr: (B + 1,) sentence offsets into ``items``.
            weights: also return the attention weights.

        Returns:
            logits (B, vocab), s_t (B, hidden), and (N,) weights p_tj (or None).
        """
        top = setattn.bipartite(torch.arange(ptr.numel()), ptr)  # query b -> items of b
        q = state[:, None, :]  # (B, 1, hidden): one head
        kv = items[:, None, :]  # (N, 1, E)
        res = setattn.attend(q, kv, kv, top, self.score, return_weights=weights)
        context, graph = res if weights else (res, None)
        context = context[:, 0]  # (B, E)
        state = self.cell(torch.cat([self.embed(prev), context], 1), state)  # (B, hidden)
        logits = self.out(torch.cat([state, context], 1))  # (B, vocab)
        # bipartite edges are target-major, sources ascending: item order per sentence
        return logits, state, None if graph is None else graph.weights[:, 0]


class Seq2Seq(nn.Module):
    """Encoder + attention decoder."""

    def __init__(self, src_vocab: int, tgt_vocab: int, emb: int = 32, hidden: int = 128):
        super().__init__()
        self.encoder = Encoder(src_vocab, emb, hidden // 2)
        self.decoder = AttentionDecoder(tgt_vocab, emb, hidden, hidden, att_hidden=hidden // 2)

    def forward(self, src: Tensor, lengths: Tensor, tgt: Tensor) -> Tensor:
        """Teacher forcing: (B, Ts) sources, (B,) lengths, (B, T) targets -> (B, T, vocab)."""
        items, ptr = self.encoder(src, lengths)
        state = self.decoder.initial_state(items, ptr)
        prev = torch.full((src.shape[0],), BOS, dtype=torch.long)
        logits = []
        for t in range(tgt.shape[1]):
            out, state, _ = self.decoder.step(prev, state, items, ptr)
            logits.append(out)
            prev = tgt[:, t]
        return torch.stack(logits, 1)

    @torch.no_grad()
    def greedy(self, src: Tensor, lengths: Tensor, steps: int
               ) -> tuple[Tensor, list[Tensor]]:
        """Greedy decoding: ids (B, steps) and per step the (N,) attention weights."""
        items, ptr = self.encoder(src, lengths)
        state = self.decoder.initial_state(items, ptr)
        prev = torch.full((src.shape[0],), BOS, dtype=torch.long)
        ids, weights = [], []
        for _ in range(steps):
            out, state, w = self.decoder.step(prev, state, items, ptr, weights=True)
            prev = out.argmax(1)
            ids.append(prev)
            weights.append(w)
        return torch.stack(ids, 1), weights


# ---------------------------------------------------------------------------------------
# training and evaluation


def exact_match(model: Seq2Seq, pairs: list[tuple[str, str]], src_vocab: CharVocab,
                tgt_vocab: CharVocab, batch_size: int = 500) -> tuple[float, list[str]]:
    """Fraction of sources whose decoded string equals the ISO target, and the predictions."""
    model.eval()
    preds = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        src, lengths, _ = encode_batch(chunk, src_vocab, tgt_vocab)
        ids, _ = model.greedy(src, lengths, TARGET_LEN + 1)
        preds += [tgt_vocab.decode(row.tolist()[: _eos(row.tolist())]) for row in ids]
    model.train()
    hits = sum(p == t for p, (_, t) in zip(preds, pairs))
    return hits / max(len(pairs), 1), preds


def char_accuracy(preds: list[str], targets: list[str]) -> float:
    """Share of the target characters that the prediction has at the same position."""
    hits = sum(p == t for pred, target in zip(preds, targets) for p, t in zip(pred, target))
    return hits / max(sum(len(t) for t in targets), 1)


def majority_baseline(train: list[str], targets: list[str]) -> float:
    """``char_accuracy`` of the best input-blind guess: per position, the most common
    training character (what a model that ignores its input can reach at best)."""
    guess = "".join(Counter(column).most_common(1)[0][0] for column in zip(*train))
    return char_accuracy([guess] * len(targets), targets)


def _eos(ids: list[int]) -> int:
    """Length before the first EOS (the whole list without one)."""
    return ids.index(EOS) if EOS in ids else len(ids)


def draw_alignments(model: Seq2Seq, pairs: list[tuple[str, str]], src_vocab: CharVocab,
                    tgt_vocab: CharVocab, out: Path) -> list[Path]:
    """One alignment heatmap per pair: output characters x input characters."""
    paths = []
    src, lengths, _ = encode_batch(pairs, src_vocab, tgt_vocab)
    ids, weights = model.greedy(src, lengths, TARGET_LEN + 1)
    ptr = ptr_from_sizes(lengths)
    for b, (source, target) in enumerate(pairs):
        row = ids[b].tolist()
        n_out = min(_eos(row) + 1, len(row))  # include the EOS step
        att = torch.stack([w[ptr[b] : ptr[b + 1]] for w in weights[:n_out]])  # (T_out, Ts)
        labels = [tgt_vocab.itos[i] for i in row[:n_out]]
        paths.append(plot_alignment(att, labels, list(source), out / f"alignment_{b}.png",
                                    title=f"{source!r} -> {tgt_vocab.decode(row)!r} "
                                          f"(target {target})",
                                    xlabel="input characters (\u00b7 = space)",
                                    ylabel="output characters"))
    return paths


def picture_pairs(pairs: list[tuple[str, str]], count: int) -> list[tuple[str, str]]:
    """The longest of the first 100 pairs (a weekday, a month name: a busy alignment),
    then the first pairs in order, ``count`` in all."""
    if count <= 0:
        return []
    longest = max(pairs[:100], key=lambda pair: len(pair[0]))
    return [longest] + [p for p in pairs if p is not longest][: count - 1]


def train_epoch(model: Seq2Seq, opt: torch.optim.Optimizer, sched, train: list[tuple[str, str]],
                vocabs: tuple[CharVocab, CharVocab], batch_size: int, bar: tqdm) -> None:
    """One pass over ``train`` (in its current order) with teacher forcing."""
    for s in range(0, len(train), batch_size):
        src, lengths, tgt = encode_batch(train[s : s + batch_size], *vocabs)
        logits = model(src, lengths, tgt)  # (B, T, vocab)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten())
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
        bar.update(1)


def fit(model: Seq2Seq, train: list[tuple[str, str]], val: list[tuple[str, str]],
        vocabs: tuple[CharVocab, CharVocab], args: argparse.Namespace, rng: random.Random
        ) -> list[float]:
    """Train ``args.epochs`` epochs; load the weights of the best validation epoch.

    Returns:
        The validation exact match after every epoch (ties go to the later epoch).
    """
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps_per_epoch = -(-len(train) // args.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=args.epochs
                                                * steps_per_epoch)
    bar = tqdm(total=args.epochs * steps_per_epoch, desc="seq2seq", unit="step")
    curve, best_state = [], None
    for _ in range(args.epochs):
        rng.shuffle(train)
        train_epoch(model, opt, sched, train, vocabs, args.batch_size, bar)
        curve.append(exact_match(model, val, *vocabs)[0])
        bar.set_postfix(val=f"{curve[-1]:.4f}")
        if curve[-1] >= max(curve):
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
    bar.close()
    model.load_state_dict(best_state)
    return curve


def make_data(args: argparse.Namespace, rng: random.Random) -> dict[str, list[tuple[str, str]]]:
    """Train / validation / test pairs over disjoint calendar days (``split_days``)."""
    train_days, val_days, test_days = split_days(args.val_size, args.test_size, rng)
    return {"train": make_pairs(args.train_size, train_days, rng),
            "val": make_pairs(args.val_size, val_days, rng, distinct_dates=True),
            "test": make_pairs(args.test_size, test_days, rng, distinct_dates=True)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = new_parser(__doc__)
    p.add_argument("--train-size", type=int, default=20000, help="training pairs")
    p.add_argument("--val-size", type=int, default=1000,
                   help="validation dates (epoch choice), one wording each")
    p.add_argument("--test-size", type=int, default=2000, help="test dates, one wording each")
    p.add_argument("--epochs", type=int, default=8, help="passes over the training pairs")
    p.add_argument("--batch-size", type=int, default=64, help="pairs per step")
    p.add_argument("--hidden", type=int, default=128, help="encoder (both directions) and "
                   "decoder state width")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    p.add_argument("--pictures", type=int, default=3, help="alignment heatmaps to draw")
    add_run_options(p, "runs/seq2seq", seed_help="random seed (data and model)",
                    quick_help="about 15 s: 2000 pairs, 2 epochs, a smaller model")
    args = p.parse_args(argv)
    if args.quick:
        args.train_size, args.val_size, args.test_size, args.epochs = 2000, 200, 200, 2
        args.hidden, args.batch_size, args.pictures = 64, 32, 1
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    start_run(args)
    rng = random.Random(args.seed)
    start = time.perf_counter()
    data = make_data(args, rng)
    vocabs = (CharVocab("".join(s for part in data.values() for s, _ in part)),
              CharVocab(TARGET_CHARS))
    model = Seq2Seq(len(vocabs[0]), len(vocabs[1]), hidden=args.hidden)
    curve = fit(model, data["train"], data["val"], vocabs, args, rng)
    accuracy, preds = exact_match(model, data["test"], *vocabs)
    targets = [t for _, t in data["test"]]
    pictures = draw_alignments(model, picture_pairs(data["test"], args.pictures), *vocabs,
                               args.out)
    best = max(range(len(curve)), key=lambda e: (curve[e], e))
    metrics = write_metrics({
        "exact_match": accuracy,
        "char_accuracy": char_accuracy(preds, targets),
        "input_blind_char_accuracy": majority_baseline([t for _, t in data["train"]], targets),
        "test_size": len(data["test"]),
        "val_size": len(data["val"]),
        "train_size": len(data["train"]),
        "best_epoch": best + 1,
        "val_curve": curve,
        "test_dates_in_train": len({t for _, t in data["test"]} & {t for _, t in data["train"]}),
        "examples": [{"source": s, "target": t, "prediction": p}
                     for (s, t), p in zip(data["test"][:10], preds[:10])],
        "pictures": [p.name for p in pictures],
    }, args, start)
    print_result(f"dates -> ISO exact match {accuracy:.4f} on {len(data['test'])} test dates "
                 "never seen in training", metrics, args.out,
                 detail=f"epoch {best + 1}/{args.epochs} chosen on validation "
                        f"({curve[best]:.4f})")
    return metrics


if __name__ == "__main__":
    main()
