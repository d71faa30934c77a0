"""Smallest end-to-end job: handwritten digits as sets of patches, through the engine.

Each 8x8 digit becomes a set of 16 patches (2x2 pixels plus the patch's row and
column). Two rounds of self-attention over the complete set, then global attention
pooling with one learned query per set, then a linear classifier. Everything is
``setattn.attend`` on ``complete`` and ``bipartite`` topologies.

    python examples/demo.py --out runs/demo
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

import setattn
from setattn.datasets import load_digits
from setattn.topology import ptr_from_sizes

PATCH = 2
HEADS = 4


def patches(images: torch.Tensor) -> torch.Tensor:
    """(B, 1, 8, 8) -> (B * 16, 4 + 2): pixel values and (row, col) / 4 of each patch."""
    b = images.shape[0]
    p = images.unfold(2, PATCH, PATCH).unfold(3, PATCH, PATCH)  # (B, 1, 4, 4, 2, 2)
    pix = p.reshape(b, 4, 4, PATCH * PATCH)  # (B, 4, 4, 4)
    rows, cols = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
    pos = torch.stack([rows, cols], -1).float().div(4).expand(b, 4, 4, 2)  # (B, 4, 4, 2)
    return torch.cat([pix, pos], -1).reshape(b * 16, PATCH * PATCH + 2)


class PatchSetClassifier(nn.Module):
    """Self-attention over each set of patches, attention pooling, linear head."""

    def __init__(self, dim: int = 64, classes: int = 10):
        super().__init__()
        self.embed = nn.Linear(PATCH * PATCH + 2, dim)
        self.qkv = nn.ModuleList([nn.Linear(dim, 3 * dim) for _ in range(2)])
        self.ff = nn.ModuleList([nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU())
                                 for _ in range(2)])
        self.pool_query = nn.Parameter(torch.randn(1, HEADS, dim // HEADS))
        self.pool_kv = nn.Linear(dim, 2 * dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor, ptr: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)  # (N, D)
        top = setattn.complete(ptr)
        for qkv, ff in zip(self.qkv, self.ff):
            q, k, v = qkv(h).view(-1, 3, HEADS, h.shape[1] // HEADS).unbind(1)  # (N, H, D/H)
            h = h + setattn.attend(q, k, v, top).flatten(1)
            h = h + ff(h)
        g = ptr.numel() - 1
        k, v = self.pool_kv(h).view(-1, 2, HEADS, h.shape[1] // HEADS).unbind(1)
        q = self.pool_query.expand(g, -1, -1)  # (G, H, D/H)
        pooled = setattn.attend(q, k, v, setattn.bipartite(torch.arange(g + 1), ptr))
        return self.head(pooled.flatten(1))  # (G, classes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/demo"))
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    digits = load_digits()
    images, labels = digits.images, digits.labels
    perm = torch.randperm(labels.numel())
    test, train = perm[:360], perm[360:]
    model = PatchSetClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    ptr64 = ptr_from_sizes([16] * 64)
    for _ in tqdm(range(args.epochs), desc="training", unit="epoch"):
        model.train()
        for batch in train[torch.randperm(train.numel())].split(64):
            ptr = ptr64 if batch.numel() == 64 else ptr_from_sizes([16] * batch.numel())
            loss = nn.functional.cross_entropy(model(patches(images[batch]), ptr), labels[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(patches(images[test]), ptr_from_sizes([16] * test.numel())).argmax(1)
    acc = (pred == labels[test]).float().mean().item()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "metrics.json").write_text(json.dumps({"test_accuracy": acc}, indent=2))
    print(f"digits as patch sets: test accuracy {acc:.3f} on {test.numel()} held-out images")


if __name__ == "__main__":
    main()
