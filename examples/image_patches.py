"""Images as sets of patches: 2-D positions, self-attention blocks and attention pooling.

Every image is cut into a grid of p x p cells; each cell is one token of a set of P
tokens with its grid (row, column) as ``pos``. A token's features ``x`` are the pixels
of a k x k window centred on its cell (k >= p, zeros outside the image; ``--window``),
an overlapping patch embedding as in CvT and PVTv2: with k = p they are the plain
non-overlapping patches of ``setattn.domains.image_to_patches``, with k > p neighbouring
tokens share pixels, so a token also sees its surroundings. The number of tokens and
their positions do not depend on k, and the model treats them as a set. The model (a
small Vision Transformer whose class token is replaced by attention pooling):

* a linear embedding of the token windows + fixed 2-D sinusoidal position encodings
  (half of the features encode the row, half the column);
* pre-norm transformer blocks over the ``complete`` topology of each image (every
  token attends to every token of its own image);
* global attention pooling: a learned query per head attends to the tokens;
* a linear classifier.

Two bundled data sets: UCI digits (1797 images, 8 x 8; by default 2 x 2 cells -> 16
tokens per image, 4 x 4 windows) and MNIST-5k (5000 images, 28 x 28; 7 x 7 cells -> 16
tokens, 13 x 13 windows). Each is split at
random (per seed) into a test part (``--test-fraction``), a validation part
(``--val-fraction``) and a training part. Training images are shifted by up to
``--shift`` pixels and rotated / zoomed at random (``--rotate``, ``--scale``); the loss
is label-smoothed cross-entropy. Validation and test predictions may sum the logits of
the image and its four shifts by ``--tta`` pixels. After every epoch the model is
scored on the validation part; the weights of the best validation epoch are evaluated
once on the test part. ``--seeds`` runs (split and model drawn anew), test accuracy as
mean and standard deviation. The per-data-set defaults are in ``DATASETS``.

Pictures (first seed, test images): per-token contributions to the predicted class's
logit by integrated gradients from a black image (``setattn.explain``), and the pooling
attention relative to uniform (weight x P, 1 = no preference), each drawn over the
token's p x p cell with a diverging colour bar (with k > p a token's window also covers
pixels of its neighbours).

    python examples/image_patches.py --out runs/image_patches
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from common import add_run_options, new_parser, print_result, start_run, write_metrics
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from tqdm import tqdm

import setattn
from setattn.datasets import ImageSet, load_digits, load_mnist5k
from setattn.explain import attention_contributions, integrated_gradients
from setattn.nn import GlobalAttentionPool, Sinusoidal2DEncoding, TransformerBlock, grid_positions
from setattn.viz.images import plot_patch_contributions


class Setting(NamedTuple):
    """Per-data-set defaults (how each was chosen: ``docs/guide/examples.rst``)."""

    loader: Callable[[], ImageSet]
    patch: int  # grid cell side p: one token per p x p cell
    window: int  # side of the pixel window a token sees, centred on its cell (>= p)
    epochs: int
    shift: int  # random translation, pixels
    rotate: float  # random rotation, degrees (+-)
    scale: float  # random zoom, relative (+-)
    tta: int  # test-time views: the image and its shifts by this many pixels (0: none)


DATASETS = {
    "digits": Setting(load_digits, 2, 4, 80, 1, 0.0, 0.0, 1),
    "mnist5k": Setting(load_mnist5k, 7, 13, 60, 2, 10.0, 0.1, 1),
}


class PatchSetClassifier(nn.Module):
    """Patch embedding + 2-D positions -> transformer blocks -> attention pooling -> linear.

    Args:
        patch_dim: pixels per patch, C * p * p.
        classes: number of classes.
        dim: D (divisible by 4 and by ``heads``).
        heads: attention heads of the blocks and of the pooling.
        layers: transformer blocks.
        dropout: inside the blocks and before the classifier.
    """

    def __init__(self, patch_dim: int, classes: int, dim: int = 64, heads: int = 4,
                 layers: int = 4, dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Linear(patch_dim, dim)
        self.position = Sinusoidal2DEncoding(dim)
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, ff_dim=2 * dim, dropout=dropout)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.pool = GlobalAttentionPool(dim, heads)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(dim, classes)

    def forward(self, x: Tensor, pos: Tensor, ptr: Tensor) -> Tensor:
        """(N, patch_dim) patches with (N, 2) grid positions of G images (ptr (G + 1,))
        -> (G, classes) logits."""
        h = self.embed(x) + self.position(pos)  # (N, D)
        top = setattn.complete(ptr)
        for block in self.blocks:
            h = block(h, top)  # (N, D)
        return self.out(self.drop(self.pool(self.norm(h), ptr=ptr)))  # (G, classes)


def patch_windows(images: Tensor, patch: int, window: int) -> Tensor:
    """Token features: per p x p grid cell, the pixels of the window x window square centred
    on it (zeros outside the image); window = p gives the plain non-overlapping patches.

    Args:
        images: (B, C, H, W), H and W multiples of ``patch``.
        patch: p, the grid cell side.
        window: k >= p with k - p even.

    Returns:
        (B, P, C * k * k), P = (H / p) * (W / p) cells in row-major order.
    """
    if window < patch or (window - patch) % 2:
        raise ValueError(f"argument window must be >= patch ({patch}) with window - patch even, "
                         f"got {window}")
    cols = F.unfold(images, window, padding=(window - patch) // 2, stride=patch)  # (B, C*k*k, P)
    return cols.transpose(1, 2)  # (B, P, C*k*k)


def to_batch(images: Tensor, labels: Tensor | None, patch: int, window: int) -> Batch:
    """(B, C, H, W) images -> a PyG batch of patch sets (x, pos, y, batch, ptr)."""
    x = patch_windows(images, patch, window)  # (B, P, F)
    b, p, f = x.shape
    pos = grid_positions(images.shape[2] // patch, images.shape[3] // patch)  # (P, 2)
    return Batch(x=x.reshape(b * p, f), pos=pos.repeat(b, 1), y=labels,
                 batch=torch.arange(b).repeat_interleave(p), ptr=torch.arange(b + 1) * p)


def one_set(image: Tensor, patch: int, window: int) -> Data:
    """One (C, H, W) image as a set: ``x`` (P, C * k * k), ``pos`` (P, 2)."""
    b = to_batch(image[None], None, patch, window)
    return Data(x=b.x, pos=b.pos)


def random_shift(images: Tensor, max_shift: int, gen: torch.Generator) -> Tensor:
    """Translate every image by up to ``max_shift`` pixels (zeros fill in): (B, C, H, W)."""
    if max_shift <= 0:
        return images
    b, _, h, w = images.shape
    padded = F.pad(images, (max_shift,) * 4)  # (B, C, H + 2s, W + 2s)
    offsets = torch.randint(0, 2 * max_shift + 1, (b, 2), generator=gen)  # (B, 2)
    return torch.stack([padded[i, :, r : r + h, c : c + w]
                        for i, (r, c) in enumerate(offsets.tolist())])


def random_affine(images: Tensor, degrees: float, scale: float, gen: torch.Generator) -> Tensor:
    """Rotate every image by up to +-``degrees`` and zoom it by a factor in 1 +- ``scale``
    about its centre (bilinear, zeros fill in): (B, C, H, W)."""
    if degrees <= 0 and scale <= 0:
        return images
    b = images.shape[0]
    angle = (2 * torch.rand(b, generator=gen) - 1) * math.radians(degrees)  # (B,)
    zoom = 1 + (2 * torch.rand(b, generator=gen) - 1) * scale  # (B,)
    cos, sin, zero = angle.cos() / zoom, angle.sin() / zoom, torch.zeros(b)  # (B,) each
    theta = torch.stack([torch.stack([cos, -sin, zero], 1),
                         torch.stack([sin, cos, zero], 1)], 1)  # (B, 2, 3)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)  # (B, H, W, 2)
    return F.grid_sample(images, grid, align_corners=False)


def shifted_views(images: Tensor, shift: int) -> list[Tensor]:
    """The images and their translations by ``shift`` pixels up, down, left and right
    (zeros fill in); only the images when ``shift`` is 0."""
    if shift <= 0:
        return [images]
    s = shift
    padded = F.pad(images, (s,) * 4)  # (B, C, H + 2s, W + 2s)
    h, w = images.shape[2:]
    return [padded[:, :, s + r : s + r + h, s + c : s + c + w]
            for r, c in ((0, 0), (-s, 0), (s, 0), (0, -s), (0, s))]


def split(data: ImageSet, val_fraction: float, test_fraction: float, seed: int
          ) -> tuple[Tensor, Tensor, Tensor]:
    """Seeded random train / validation / test indices (shares of all images)."""
    perm = torch.randperm(len(data.labels), generator=torch.Generator().manual_seed(seed))
    n_test, n_val = round(test_fraction * len(perm)), round(val_fraction * len(perm))
    return perm[n_test + n_val :], perm[n_test : n_test + n_val], perm[:n_test]


@torch.no_grad()
def accuracy(model: nn.Module, images: Tensor, labels: Tensor, s: Setting) -> float:
    """Share of ``images`` whose class (summed logits of ``shifted_views``) is right."""
    model.eval()
    hits = 0
    for chunk in torch.arange(len(labels)).split(500):
        logits = 0
        for view in shifted_views(images[chunk], s.tta):
            b = to_batch(view, None, s.patch, s.window)
            logits = logits + model(b.x, b.pos, b.ptr)  # (G, classes)
        hits += int((logits.argmax(1) == labels[chunk]).sum())
    model.train()
    return hits / max(len(labels), 1)


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, sched, images: Tensor,
                labels: Tensor, s: Setting, args: argparse.Namespace,
                gen: torch.Generator) -> None:
    """One pass over the training images (``images``, ``labels``) in random order."""
    for chunk in torch.randperm(len(labels), generator=gen).split(args.batch_size):
        seen = random_affine(random_shift(images[chunk], s.shift, gen), s.rotate, s.scale, gen)
        b = to_batch(seen, labels[chunk], s.patch, s.window)
        loss = F.cross_entropy(model(b.x, b.pos, b.ptr), b.y, label_smoothing=args.smoothing)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def setting(name: str, args: argparse.Namespace) -> Setting:
    """The data set's defaults, with the options given on the command line in their place."""
    s = DATASETS[name]
    patch = args.patch or s.patch
    return s._replace(patch=patch, window=args.window or max(s.window, patch),
                      epochs=args.epochs or s.epochs,
                      shift=s.shift if args.shift < 0 else args.shift,
                      rotate=s.rotate if args.rotate < 0 else args.rotate,
                      scale=s.scale if args.scale < 0 else args.scale,
                      tta=s.tta if args.tta < 0 else args.tta)


def train_one(name: str, data: ImageSet, args: argparse.Namespace, seed: int
              ) -> tuple[PatchSetClassifier, dict, Tensor]:
    """One seed: train, keep the best validation epoch's weights, test them once.

    Returns:
        The model (best validation epoch), its record, and the test indices.
    """
    s = setting(name, args)
    train_idx, val_idx, test_idx = split(data, args.val_fraction, args.test_fraction, seed)
    if args.limit:
        train_idx = train_idx[: args.limit]
    images, labels = data.images, data.labels
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = PatchSetClassifier(images.shape[1] * s.window ** 2, int(labels.max()) + 1,
                               args.dim, args.heads, args.layers, args.dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps = s.epochs * math.ceil(len(train_idx) / args.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=steps, pct_start=0.1)
    curve, best_state, start = [], None, time.perf_counter()
    for _ in tqdm(range(s.epochs), desc=f"{name} seed {seed}", unit="epoch"):
        train_epoch(model, opt, sched, images[train_idx], labels[train_idx], s, args, gen)
        curve.append(accuracy(model, images[val_idx], labels[val_idx], s))
        if curve[-1] >= max(curve):  # ties go to the later epoch (lower learning rate)
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    best_epoch = max(range(len(curve)), key=lambda e: (curve[e], e)) + 1
    test_acc = accuracy(model, images[test_idx], labels[test_idx], s)
    tqdm.write(f"{name} seed {seed}: validation {curve[best_epoch - 1]:.4f} at epoch "
               f"{best_epoch}/{s.epochs}, test {test_acc:.4f} on {len(test_idx)} images")
    return model, {"seed": seed, "test_accuracy": test_acc, "best_epoch": best_epoch,
                   "train": len(train_idx), "validation": len(val_idx), "test": len(test_idx),
                   "val_accuracy": curve[best_epoch - 1], "val_curve": curve,
                   "seconds": round(time.perf_counter() - start, 2)}, test_idx


def explain_images(model: PatchSetClassifier, images: Tensor, patch: int, window: int = 0
                   ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-patch explanations of the predicted class of each image (tokens as in
    ``one_set``; window 0: the patch alone).

    Returns:
        predictions (K,), predicted probabilities (K,), integrated gradients (K, P) in
        logit units, attention relative to uniform (K, P) (weight x P).
    """
    model.eval()

    def forward(b: Batch) -> Tensor:
        return model(b.x, b.pos, b.ptr)  # (G, classes) logits

    preds, probs, ig, att = [], [], [], []
    for image in images:
        data = one_set(image, patch, window or patch)
        with torch.no_grad():
            logits = forward(Batch.from_data_list([data]))[0]  # (classes,)
        pred = int(logits.argmax())
        preds.append(pred)
        probs.append(float(logits.softmax(0)[pred]))
        ig.append(integrated_gradients(forward, data, pred).values)  # (P,)
        att.append(attention_contributions(forward, data, "pool", pred).values)  # (P,)
    return torch.tensor(preds), torch.tensor(probs), torch.stack(ig), torch.stack(att)


def draw_explanations(model: PatchSetClassifier, name: str, images: Tensor, labels: Tensor,
                      patch: int, window: int, out: Path) -> list[Path]:
    """Two pictures of K test images: integrated gradients and attention per patch."""
    preds, probs, ig, att = explain_images(model, images, patch, window)
    grid = (images.shape[2] // patch, images.shape[3] // patch)
    titles = [f"label {int(y)}, pred {int(p)} ({q:.2f})"
              for y, p, q in zip(labels, preds, probs.tolist())]
    common = {"titles": titles, "grid_shape": grid, "patch_size": patch}
    return [
        plot_patch_contributions(
            images[:, 0], ig, path=out / f"{name}_integrated_gradients.png",
            unit="contribution to the predicted class's logit", **common,
            suptitle=f"{name}: integrated gradients per patch from a black image; "
                     "titles: label, prediction (probability)"),
        plot_patch_contributions(
            images[:, 0], att, path=out / f"{name}_attention.png", centre=1.0,
            unit=f"pooling weight x {grid[0] * grid[1]} patches (1 = uniform)", **common,
            suptitle=f"{name}: attention pooling weight relative to uniform (mean of heads), "
                     "not a contribution; titles: label, prediction (probability)"),
    ]


def run(name: str, args: argparse.Namespace) -> dict:
    """All seeds on one data set; pictures from the first; returns its metrics."""
    s = setting(name, args)
    data, patch = s.loader(), s.patch
    runs, pictures = [], []
    for seed in range(args.seed, args.seed + args.seeds):
        model, record, test_idx = train_one(name, data, args, seed)
        runs.append(record)
        if seed == args.seed and args.pictures:
            shown = test_idx[: args.pictures]
            pictures = draw_explanations(model, name, data.images[shown], data.labels[shown],
                                         patch, s.window, args.out)
    accs = [r["test_accuracy"] for r in runs]
    return {"test_accuracy_mean": statistics.mean(accs),
            "test_accuracy_std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "runs": runs, **{part: runs[0][part] for part in ("train", "validation", "test")},
            "patch_size": patch, "window": s.window,
            "patches_per_image": (data.images.shape[2] // patch) ** 2,
            "pictures": [p.name for p in pictures]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = new_parser(__doc__)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS),
                   help="data sets to run")
    p.add_argument("--seeds", type=int, default=5, help="independent runs (seeds --seed, "
                   "--seed + 1, ...): split and model")
    p.add_argument("--test-fraction", type=float, default=0.2, help="test share")
    p.add_argument("--val-fraction", type=float, default=0.1,
                   help="validation share (epoch choice)")
    p.add_argument("--epochs", type=int, default=0,
                   help=f"epochs (0: per data set, "
                   f"{DATASETS['digits'].epochs} for digits and "
                   f"{DATASETS['mnist5k'].epochs} for mnist5k)")
    p.add_argument("--patch", type=int, default=0,
                   help="grid cell side p, one token per cell (0: per data set)")
    p.add_argument("--window", type=int, default=0,
                   help="pixel window per token, centred on its patch (0: per data set)")
    p.add_argument("--shift", type=int, default=-1,
                   help="random shift in pixels (-1: per data set)")
    p.add_argument("--rotate", type=float, default=-1,
                   help="random rotation, +- degrees (-1: per data set)")
    p.add_argument("--scale", type=float, default=-1,
                   help="random zoom, 1 +- this factor (-1: per data set)")
    p.add_argument("--tta", type=int, default=-1, help="test-time views: the image and its "
                   "shifts by this many pixels, logits summed (0: none; -1: per data set)")
    p.add_argument("--smoothing", type=float, default=0.1, help="label smoothing")
    p.add_argument("--batch-size", type=int, default=64, help="images per step")
    p.add_argument("--dim", type=int, default=64, help="model width (divisible by 4)")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (AdamW)")
    p.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay")
    p.add_argument("--limit", type=int, default=0, help="training images (0: all)")
    p.add_argument("--pictures", type=int, default=12, help="test images to draw")
    add_run_options(p, "runs/image_patches", seed_help="first seed",
                    quick_help="about 30 s: 8 epochs on 1000 images, small model, 1 seed")
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.limit, args.dim, args.layers, args.pictures = 8, 1000, 32, 1, 4
        args.seeds, args.batch_size, args.lr = 1, 32, 5e-3
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    start_run(args)  # every seed seeds torch again with its own seed
    start = time.perf_counter()
    results = {name: run(name, args) for name in args.datasets}
    metrics = write_metrics({
        "test_accuracy_mean": {name: r["test_accuracy_mean"] for name, r in results.items()},
        "test_accuracy_std": {name: r["test_accuracy_std"] for name, r in results.items()},
        "datasets": results,
    }, args, start)
    summary = ", ".join(f"{name} {100 * r['test_accuracy_mean']:.2f} +- "
                        f"{100 * r['test_accuracy_std']:.2f} %" for name, r in results.items())
    print_result(f"patch-set test accuracy {summary}", metrics, args.out,
                 detail=f"{args.seeds} seed(s), epoch chosen on validation")
    return metrics


if __name__ == "__main__":
    main()
