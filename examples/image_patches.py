"""Images as sets of patches: 2-D positions, self-attention blocks and attention pooling.

Every image is cut into a grid of non-overlapping p x p patches
(``setattn.domains.image_to_patches``): a set of P nodes with the pixels of a patch as
features ``x`` (P, p * p) and its grid (row, column) as ``pos``. The model (a small
Vision Transformer whose class token is replaced by attention pooling):

* a linear patch embedding + fixed 2-D sinusoidal position encodings (half of the
  features encode the row, half the column);
* pre-norm transformer blocks over the ``complete`` topology of each image (every
  patch attends to every patch of its own image);
* global attention pooling: a learned query per head attends to the patches; its
  weights are the overlay of the picture;
* a linear classifier.

Two bundled data sets: UCI digits (1797 images, 8 x 8, 2 x 2 patches -> 16 per image)
and MNIST-5k (5000 images, 28 x 28, 4 x 4 patches -> 49 per image). Each is split at
random (``--seed``) into a held-out test part (``--test-fraction``) and a training
part; training images are shifted by up to ``--shift`` pixels at random (the only
augmentation). The model of the last epoch is evaluated once on the test part.

    python examples/image_patches.py --out runs/image_patches
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from common import add_run_options, new_parser, print_result, start_run, write_metrics
from torch import Tensor, nn
from torch_geometric.data import Batch
from tqdm import tqdm

import setattn
from setattn.datasets import ImageSet, load_digits, load_mnist5k
from setattn.domains import images_to_batch
from setattn.nn import GlobalAttentionPool, Sinusoidal2DEncoding, TransformerBlock
from setattn.viz import plot_patch_attention

# per data set: loader, patch size, default epochs, random shift (pixels)
DATASETS = {
    "digits": (load_digits, 2, 80, 1),
    "mnist5k": (load_mnist5k, 4, 60, 2),
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


def random_shift(images: Tensor, max_shift: int, gen: torch.Generator) -> Tensor:
    """Translate every image by up to ``max_shift`` pixels (zeros fill in): (B, C, H, W)."""
    if max_shift <= 0:
        return images
    b, _, h, w = images.shape
    padded = F.pad(images, (max_shift,) * 4)  # (B, C, H + 2s, W + 2s)
    offsets = torch.randint(0, 2 * max_shift + 1, (b, 2), generator=gen)  # (B, 2)
    return torch.stack([padded[i, :, r : r + h, c : c + w]
                        for i, (r, c) in enumerate(offsets.tolist())])


def split(data: ImageSet, test_fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """Seeded random train / test indices."""
    perm = torch.randperm(len(data.labels), generator=torch.Generator().manual_seed(seed))
    n_test = round(test_fraction * len(perm))
    return perm[n_test:], perm[:n_test]


def to_batch(images: Tensor, labels: Tensor, patch: int) -> Batch:
    """(B, C, H, W) images -> a PyG batch of patch sets (x, pos, y, batch, ptr)."""
    return images_to_batch(images, patch, labels=labels)


@torch.no_grad()
def accuracy(model: nn.Module, images: Tensor, labels: Tensor, patch: int) -> float:
    model.eval()
    hits = 0
    for chunk in torch.arange(len(labels)).split(500):
        b = to_batch(images[chunk], labels[chunk], patch)
        hits += int((model(b.x, b.pos, b.ptr).argmax(1) == b.y).sum())
    model.train()
    return hits / max(len(labels), 1)


@torch.no_grad()
def draw_attention(model: PatchSetClassifier, images: Tensor, labels: Tensor, patch: int,
                   path: Path) -> Path:
    """Test images beside their pooling weights per patch (mean over heads)."""
    model.eval()
    b = to_batch(images, labels, patch)
    with setattn.capture() as captured:
        pred = model(b.x, b.pos, b.ptr).argmax(1)
    w = captured["pool"].weights.mean(1)  # (N,): edges patch j -> image g, target-major
    per_image = w.view(len(labels), -1)  # (G, P): every image has the same P patches
    grid = (images.shape[2] // patch, images.shape[3] // patch)
    titles = [f"label {int(y)}, pred {int(p)}" for y, p in zip(labels, pred)]
    return plot_patch_attention(images[:, 0], per_image, grid, patch, path, titles=titles)


def run(name: str, args: argparse.Namespace, gen: torch.Generator) -> dict:
    """Train and test on one data set; returns its metrics."""
    loader, patch, epochs, shift = DATASETS[name]
    epochs = args.epochs or epochs
    shift = shift if args.shift < 0 else args.shift
    data = loader()
    train_idx, test_idx = split(data, args.test_fraction, args.seed)
    if args.limit:
        train_idx = train_idx[: args.limit]
    images, labels = data.images, data.labels
    model = PatchSetClassifier(images.shape[1] * patch * patch, int(labels.max()) + 1,
                               args.dim, args.heads, args.layers, args.dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps = epochs * math.ceil(len(train_idx) / args.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=steps, pct_start=0.1)
    start = time.perf_counter()
    for _ in tqdm(range(epochs), desc=name, unit="epoch"):
        for chunk in train_idx[torch.randperm(len(train_idx), generator=gen)].split(
                args.batch_size):
            b = to_batch(random_shift(images[chunk], shift, gen), labels[chunk], patch)
            loss = F.cross_entropy(model(b.x, b.pos, b.ptr), b.y, label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    test_acc = accuracy(model, images[test_idx], labels[test_idx], patch)
    picture = draw_attention(model, images[test_idx[: args.pictures]],
                             labels[test_idx[: args.pictures]], patch,
                             args.out / f"{name}_attention.png")
    tqdm.write(f"{name}: test accuracy {test_acc:.4f} on {len(test_idx)} held-out images")
    return {"test_accuracy": test_acc, "train": len(train_idx), "test": len(test_idx),
            "patch_size": patch, "patches_per_image": (images.shape[2] // patch) ** 2,
            "epochs": epochs, "shift": shift, "picture": picture.name,
            "seconds": round(time.perf_counter() - start, 2)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = new_parser(__doc__)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS),
                   help="data sets to run")
    p.add_argument("--test-fraction", type=float, default=0.2, help="held-out test share")
    p.add_argument("--epochs", type=int, default=0,
                   help="epochs (0: per data set, 80 for digits and 60 for mnist5k)")
    p.add_argument("--shift", type=int, default=-1,
                   help="random shift in pixels (-1: per data set, 1 for digits, 2 for mnist5k)")
    p.add_argument("--batch-size", type=int, default=64, help="images per step")
    p.add_argument("--dim", type=int, default=64, help="model width (divisible by 4)")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (AdamW)")
    p.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay")
    p.add_argument("--limit", type=int, default=0, help="training images (0: all)")
    p.add_argument("--pictures", type=int, default=12, help="test images to draw")
    add_run_options(p, "runs/image_patches", seed_help="random seed (split and model)")
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.limit, args.dim, args.layers, args.pictures = 1, 300, 32, 1, 6
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    gen = start_run(args)
    start = time.perf_counter()
    results = {name: run(name, args, gen) for name in args.datasets}
    metrics = write_metrics({
        "test_accuracy": {name: r["test_accuracy"] for name, r in results.items()},
        "datasets": results,
    }, args, start)
    summary = ", ".join(f"{name} {100 * r['test_accuracy']:.2f} %" for name, r in results.items())
    print_result(f"patch-set test accuracy {summary}", metrics, args.out)
    return metrics


if __name__ == "__main__":
    main()
