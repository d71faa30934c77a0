"""Text classification: word sets, local self-attention and attention pooling, averaged
with a linear model, beside a TF-IDF + logistic regression baseline.

Every text is a set of word nodes (tokens with their positions, as
``setattn.domains.document_to_data`` makes them), batched PyG style: flat (N,) nodes
and (G + 1,) offsets ``ptr``. The attention model, trained from scratch (no pretrained
vectors):

* node features: a learned word embedding (plus, with ``--char-buckets``, the mean
  embedding of the word's hashed character 3-5-grams, for rare and unseen words), plus
  a linear map of the naive-Bayes log-count ratios (Wang & Manning 2012) of the word
  and of the n-grams starting at it (``--ngrams 2``: the bigram "w_i w_i+1"), counted on
  the training part only, a training text leaving itself out; plus weak sinusoidal
  position encodings;
* a transformer block whose attention runs over a ``window`` topology: word i attends
  to the words at most ``--radius`` positions away in its own text (``--radius -1``:
  all pairs), with a learned bias per head and relative offset passed to the engine as
  a per-edge ``bias``;
* global attention pooling over the contextual word states: a learned query per head
  (Yang et al. 2016), with ``--pool attn+max`` concatenated with the max over each
  text's word states (CNN-rand's max over time, Kim 2014); dropout and a linear
  classifier.

Regularisation: small width, dropout, training words replaced by ``<unk>`` at random
(``--word-dropout``), weight decay, the best validation epoch kept. ``--ensemble M``
trains M models per round from different seeds and averages their probabilities.

The linear models (``documents_linear.py``, scikit-learn): the baseline, TF-IDF word
uni+bigrams + logistic regression, and the partner, the same plus character 2-5-grams.
Each chooses its C on the validation part and is refitted on training + validation.
``--start-token`` puts ``<s>`` before every text of the attention model and the partner
(n-grams such as "<s> how" mark the opening words); ``--partner-ngrams 3``: partner
word 1-3-grams.
The reported prediction averages the attention models' probabilities (weight w) with
the partner's (1 - w), w chosen on the validation part (``--no-linear``: w = 1).

Evaluation: a corpus with a fixed test split (TREC) is run once on it; the others are
split at random (``--seed``) into ``--folds`` K folds, fold k the test part of round k
(``--run-folds R``: the first R rounds). In every round ``--val-fraction`` of the rest
is the validation part, the only data any choice (epoch, C, w) is made on; vocabularies
and ratios come from the training part. ``--inner-folds K`` (TREC, to compare settings)
runs K-fold cross-validation of the training questions alone, the test split not
loaded. Reported: test accuracy of the average and of the baseline, mean and standard
deviation over the rounds, and the word pictures of ``documents_words.py`` (attention
relative to uniform, integrated gradients).

Data: ``--corpus mr`` (MR, Pang & Lee 2005; the default), ``cr`` (Hu & Liu 2004),
``trec`` (Li & Roth 2002), or any CSV with ``--data FILE --text-column TEXT
--label-column LABEL``. How the defaults were chosen: docs/guide/examples.rst.

    python examples/documents.py --corpus trec --out runs/documents-trec
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from common import add_run_options, new_parser, print_result, start_run, write_metrics
from documents_data import CORPORA, Encoded, batches, encode_round, load_corpus, mark_start, splits
from documents_linear import choose_weight, fit_linear
from documents_words import draw_sentences
from torch import Tensor, nn
from torch_geometric.utils import segment
from tqdm import tqdm

from setattn.domains import Tokenizer, Vocabulary
from setattn.nn import GlobalAttentionPool, SinusoidalEncoding, TransformerBlock, set_positions
from setattn.topology import Topology, complete, window

POOLS = ("attn", "attn+max")
"""What ``--pool`` takes."""


def segment_max(x: Tensor, ptr: Tensor) -> Tensor:
    """(G, D) the max over each text's rows of x (N, D), texts at offsets ptr (G + 1,);
    zeros for an empty text."""
    return segment(x, ptr, reduce="max")  # (G, D)


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
        char_buckets: hashed character n-gram buckets (0: none).
        pool: ``attn`` (attention pooling) or ``attn+max`` (its concatenation with the
            max over each text's word states, CNN-rand's max over time).
    """

    def __init__(self, vocab: int, classes: int, dim: int = 32, heads: int = 4,
                 layers: int = 1, radius: int = 2, dropout: float = 0.5,
                 attn_dropout: float = 0.1, embed_std: float = 0.02, pe_scale: float = 0.02,
                 ratio_features: int = 0, char_buckets: int = 0, pool: str = "attn"):
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"argument pool must be one of {POOLS}, got {pool!r}")
        self.max_pool = pool == "attn+max"
        self.radius, self.pe_scale = radius, pe_scale
        self.embed = nn.Embedding(vocab, dim)
        nn.init.normal_(self.embed.weight, std=embed_std)
        self.chars = (nn.EmbeddingBag(char_buckets, dim, mode="mean", padding_idx=0)
                      if char_buckets else None)
        if self.chars is not None:
            nn.init.normal_(self.chars.weight, std=embed_std)
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
        self.out = nn.Linear(2 * dim if self.max_pool else dim, classes)

    def topology(self, ptr: Tensor) -> Topology:
        """Who attends to whom inside each sentence."""
        return complete(ptr) if self.radius < 0 else window(ptr, self.radius)

    def node_inputs(self, ids: Tensor, ratios: Tensor, chars: Tensor) -> Tensor:
        """(N, D + R) the inputs of the word nodes, what explanations attribute to: the
        word embeddings of ids (N, K) (column 0: the word) plus the mean embedding of
        their character n-grams chars (N, L), and the ratios (N, R)."""
        x = self.embed(ids[:, 0])  # (N, D)
        if self.chars is not None:
            x = x + self.chars(chars)  # (N, D)
        return torch.cat([x, ratios], 1)  # (N, D + R)

    def forward(self, ids: Tensor, ratios: Tensor, chars: Tensor, ptr: Tensor) -> Tensor:
        """(N, K) node feature ids, (N, R) log-count ratios and (N, L) character n-gram
        ids of G sentences with offsets ptr (G + 1,) -> (G, C) logits."""
        return self.from_inputs(self.node_inputs(ids, ratios, chars), ptr)

    def from_inputs(self, inputs: Tensor, ptr: Tensor) -> Tensor:
        """(N, D + R) node inputs (``node_inputs``) of G sentences -> (G, C) logits."""
        dim = self.embed.embedding_dim
        x = inputs[:, :dim]  # (N, D)
        if self.ratios is not None:
            x = x + self.ratios(inputs[:, dim:])  # (N, D)
        pos = self.position(set_positions(ptr))  # (N, D)
        x = self.drop(x) + self.pe_scale * pos  # (N, D)
        top = self.topology(ptr)
        for block, bias in zip(self.blocks, self.biases):
            x = block(x, top, bias=bias(top))  # (N, D)
        x = self.norm(x)  # (N, D)
        pooled = self.pool(x, ptr=ptr)  # (G, D)
        if self.max_pool:
            pooled = torch.cat([pooled, segment_max(x, ptr)], 1)  # (G, 2D)
        return self.out(self.drop(pooled))  # (G, C)


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
        probs = sum(model(b.ids, b.ratios, b.chars, b.ptr).softmax(1) for model in models)  # (G, C)
        out.append(probs / len(models))
    for model in models:
        model.train()
    return torch.cat(out)


def accuracy(models: list[nn.Module], data: Encoded) -> float:
    """Accuracy of the models' averaged probabilities."""
    return float((probabilities(models, data).argmax(1) == data.y).float().mean())


def epochs_for(train_size: int, args: argparse.Namespace) -> int:
    """``--epochs``, or when it is 0: 12 for training parts under 6000 texts, else 6."""
    return args.epochs or (12 if train_size < 6000 else 6)


def train_model(model: nn.Module, train: Encoded, val: Encoded, args: argparse.Namespace,
                gen: torch.Generator, bar: tqdm) -> tuple[float, int]:
    """Train for ``epochs_for(len(train), args)``, keep the weights of the best validation
    epoch.

    Returns:
        The best validation accuracy and its epoch (1-based).
    """
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    epochs = epochs_for(len(train), args)
    steps = epochs * math.ceil(len(train) / args.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=steps,
                                                pct_start=0.1)
    best, best_epoch, best_state = -1.0, 0, None
    for epoch in range(1, epochs + 1):
        for b in batches(train, args.batch_size, gen):
            ids = word_dropout(b.ids, args.word_dropout)  # (N, K)
            loss = nn.functional.cross_entropy(model(ids, b.ratios, b.chars, b.ptr), b.y)
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = new_parser(__doc__)
    p.add_argument("--corpus", choices=CORPORA, default="mr", help="bundled corpus (when "
                   "no --data is given)")
    p.add_argument("--data", type=Path, default=None,
                   help="a CSV file with a header line (instead of --corpus)")
    p.add_argument("--text-column", default="text", help="text column of --data")
    p.add_argument("--label-column", default="label", help="label column of --data")
    p.add_argument("--limit", type=int, default=0, help="use a random subset of this many "
                   "texts (0: all)")
    p.add_argument("--folds", type=int, default=10, help="K of the K-fold protocol (corpora "
                   "without a fixed test split)")
    p.add_argument("--inner-folds", type=int, default=0, help="model selection on TREC: "
                   "K-fold cross-validation inside the training questions, the test split "
                   "not loaded (0: off, the fixed test split)")
    p.add_argument("--run-folds", type=int, default=0, help="rounds to run (0: all K)")
    p.add_argument("--epochs", type=int, default=0, help="epochs per model (0: 12 for "
                   "training parts under 6000 texts, else 6)")
    p.add_argument("--val-fraction", type=float, default=0.1, help="share of the training "
                   "part held out to choose epochs, C and the ensemble weight")
    p.add_argument("--ensemble", type=int, default=3, help="attention models per round "
                   "(different seeds; their probabilities are averaged)")
    p.add_argument("--no-linear", action="store_true", help="report the attention models "
                   "alone (no averaging with the linear partner)")
    p.add_argument("--batch-size", type=int, default=100, help="sentences per step")
    p.add_argument("--ngrams", type=int, default=2, help="n-gram features up to this n "
                   "(1: words only)")
    p.add_argument("--start-token", action="store_true", help="put a <s> token in front of "
                   "every text (attention model and linear partner; not the baseline), so "
                   "that n-grams such as '<s> how' mark a text's opening words")
    p.add_argument("--partner-ngrams", type=int, default=2, help="word n-grams of the "
                   "linear partner up to this n (the baseline keeps 1-2)")
    p.add_argument("--no-ratios", action="store_true", help="no log-count ratio features "
                   "(the nodes carry their word embedding only)")
    p.add_argument("--char-buckets", type=int, default=0, help="hashed character 3-5-gram "
                   "features of every word in this many buckets (0: none)")
    p.add_argument("--dim", type=int, default=32, help="embedding and model width")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--layers", type=int, default=1, help="transformer blocks")
    p.add_argument("--pool", choices=POOLS, default="attn", help="what the classifier "
                   "reads: attention pooling, or its concatenation with the max over each "
                   "text's word states")
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
    p.add_argument("--max-length", type=int, default=100, help="tokens kept per text "
                   "(attention model; the linear models read whole texts)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (AdamW)")
    p.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay")
    p.add_argument("--pictures", type=int, default=10, help="test sentences to draw")
    add_run_options(p, "runs/documents", seed_help="random seed (folds and model)")
    args = p.parse_args(argv)
    if not 0 < args.val_fraction < 1:
        p.error(f"argument --val-fraction must be between 0 and 1 (exclusive), got "
                f"{args.val_fraction}")
    if args.inner_folds and (args.data is not None or args.corpus != "trec"):
        p.error("argument --inner-folds: only for --corpus trec (a fixed test split); the "
                "other corpora are cross-validated with --folds")
    if args.quick:
        args.limit, args.run_folds, args.epochs, args.ensemble = 1500, 1, 10, 1
        args.pictures = 6
    return args


def train_ensemble(data: Encoded, split: tuple[Tensor, ...], vocab: int, classes: int,
                   args: argparse.Namespace, gen: torch.Generator, bar: tqdm
                   ) -> tuple[list[DocumentClassifier], list[dict]]:
    """``args.ensemble`` attention models trained on the training part, each keeping
    its best validation epoch; with a record per model."""
    train, val, test = (data.select(part) for part in split)
    models, records = [], []
    for _ in range(args.ensemble):
        model = DocumentClassifier(vocab, classes, args.dim, args.heads, args.layers,
                                   args.radius, args.dropout, embed_std=args.embed_std,
                                   pe_scale=args.pe_scale, ratio_features=data.ratios.shape[1],
                                   char_buckets=args.char_buckets, pool=args.pool)
        val_acc, epoch = train_model(model, train, val, args, gen, bar)
        models.append(model)
        records.append({"val_accuracy": val_acc, "best_epoch": epoch,
                        "test_accuracy": accuracy([model], test)})
    return models, records


def run_round(data: Encoded, split: tuple[Tensor, ...], texts: tuple[list[str], list[str]],
              vocab: int, classes: int, args: argparse.Namespace, gen: torch.Generator,
              bar: tqdm) -> tuple[dict, list[DocumentClassifier]]:
    """Attention models, the linear baseline and partner, and their average, on one split;
    ``texts``: what the baseline reads and what the partner reads (``--start-token``).

    Returns:
        The round's record (accuracies, choices made on validation) and the models.
    """
    models, records = train_ensemble(data, split, vocab, classes, args, gen, bar)
    val, test = data.select(split[1]), data.select(split[2])
    p_val, p_test = probabilities(models, val), probabilities(models, test)  # (M, C)
    start = time.perf_counter()
    baseline = fit_linear("baseline", texts[0], data.y, split, classes)
    partner = fit_linear("partner", texts[1], data.y, split, classes, args.partner_ngrams)
    linear_seconds = time.perf_counter() - start
    weight, val_acc = choose_weight(p_val, partner.val_probs, val.y)
    if args.no_linear:
        weight, val_acc = 1.0, float((p_val.argmax(1) == val.y).float().mean())
    combined = weight * p_test + (1 - weight) * partner.test_probs  # (M_test, C)
    attention = float((p_test.argmax(1) == test.y).float().mean())
    return {
        "test_accuracy": float((combined.argmax(1) == test.y).float().mean()),
        "val_accuracy": val_acc, "attention_weight": weight,
        "attention_test_accuracy": attention,
        "single_model_mean": sum(r["test_accuracy"] for r in records) / len(records),
        "baseline_test_accuracy": baseline.test_accuracy, "baseline_c": baseline.c,
        "baseline_val_accuracy": baseline.val_accuracy,
        "partner_test_accuracy": partner.test_accuracy, "partner_c": partner.c,
        "partner_val_accuracy": partner.val_accuracy, "members": records,
        "linear_seconds": round(linear_seconds, 2),
        "train": len(split[0]), "val": len(split[1]), "test": len(split[2]),
    }, models


def mean_std(results: list[dict], key: str) -> tuple[float, float]:
    """Mean and standard deviation (0 for one round) of ``key`` over the rounds."""
    values = torch.tensor([r[key] for r in results], dtype=torch.float64)
    return float(values.mean()), float(values.std()) if len(values) > 1 else 0.0


def fold_protocol(rounds: int, folds: int, inner: bool, fixed_test: bool) -> str:
    """What the result line calls the evaluation: the fixed test split, K-fold
    cross-validation (``inner``: inside the training texts only), or its first rounds."""
    if fixed_test:
        return "fixed test split"
    where = " of the training questions, test split not loaded" if inner else ""
    if rounds == folds:
        return f"{folds}-fold cross-validation{where}"
    part = "held out" if inner else "test"
    return f"first {rounds} of {folds} folds{where} ({part} {100 / folds:.0f} %)"


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    gen = start_run(args)
    start = time.perf_counter()
    corpus = load_corpus(args)
    tokenizer = Tokenizer()
    full = [tokenizer(t) for t in corpus.texts]
    plain = [" ".join(t) for t in full]  # the baseline's texts
    full = mark_start(full) if args.start_token else full
    tokens, texts = [t[: args.max_length] for t in full], (plain, [" ".join(t) for t in full])
    parts = splits(corpus, args)
    steps = args.ensemble * sum(epochs_for(len(s[0]), args)
                                * math.ceil(len(s[0]) / args.batch_size) for s in parts)
    bar = tqdm(total=steps, desc="documents", unit="step")
    results, pictures, classes = [], [], corpus.classes
    held_out = "held-out fold accuracy" if args.inner_folds else "test accuracy"
    for k, split in enumerate(parts):
        data, vocabs = encode_round(tokens, corpus.labels, split[0], len(classes), args)
        record, models = run_round(data, split, texts, len(vocabs[0]), len(classes), args,
                                   gen, bar)
        results.append({"round": k, **record, "vocabulary": [len(v) for v in vocabs]})
        tqdm.write(f"round {k}: {held_out} {record['test_accuracy']:.4f} (attention "
                   f"{record['attention_test_accuracy']:.4f}, weight "
                   f"{record['attention_weight']:.1f}; TF-IDF + LR baseline "
                   f"{record['baseline_test_accuracy']:.4f})")
        if k == 0:
            test = data.select(split[2])
            pictures = draw_sentences(models, test, [tokens[i] for i in split[2].tolist()],
                                      classes, probabilities(models, test), args.out,
                                      args.pictures)
    bar.close()
    mean, std = mean_std(results, "test_accuracy")
    base_mean, base_std = mean_std(results, "baseline_test_accuracy")
    rounds = len(results)
    protocol = fold_protocol(rounds, args.inner_folds or args.folds, args.inner_folds > 0,
                             corpus.fixed_test is not None)
    metrics = write_metrics({
        "data": corpus.name, "protocol": protocol,
        "test_accuracy_mean": mean, "test_accuracy_std": std,
        "baseline_test_accuracy_mean": base_mean, "baseline_test_accuracy_std": base_std,
        "attention_test_accuracy_mean": mean_std(results, "attention_test_accuracy")[0],
        "partner_test_accuracy_mean": mean_std(results, "partner_test_accuracy")[0],
        "single_model_mean": mean_std(results, "single_model_mean")[0],
        "ensemble": args.ensemble, "rounds": results, "classes": classes,
        "pictures": [p.name for p in pictures],
    }, args, start)
    print_result(f"{corpus.name} {held_out} {100 * mean:.2f} +- {100 * std:.2f} %; "
                 f"TF-IDF + LR baseline {100 * base_mean:.2f} +- {100 * base_std:.2f} %",
                 metrics, args.out, detail=protocol)
    return metrics


if __name__ == "__main__":
    main()
