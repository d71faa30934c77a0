"""Kernel ridge regression on Morgan count fingerprints, stacked with the descriptor one.

Where the descriptor kernel ridge (``setattn.molprop.kernel``) sees a molecule's bulk
properties, this one sees its substructures: two molecules are alike in proportion to
the atom environments they share (``setattn.domains.fingerprints``), the MinMax (count
Tanimoto) kernel::

    k(a, b) = sum_j min(a_j, b_j) / sum_j max(a_j, b_j)      a, b: (F,) counts

It is positive definite, 1 on the diagonal and needs no width. ``sum_j min(a_j, b_j)``
is the number of shared ones of the counts written in unary, so the kernel of two sets
is one sparse matrix product (``_unary``).

``FingerprintRidge.fit`` chooses its ridge by exact leave-one-out error on the rows the
descriptor kernel ridge searched, and ``stack_weights`` then picks, per task, the weight
w of the descriptor kernel ridge in ``w * descriptor + (1 - w) * fingerprint`` that
minimises the two's combined leave-one-out error (closed form, clipped to [0, 1]). Both
choices see the training molecules only. How the stack was chosen as a default:
``docs/guide/defaults.rst``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch
from scipy import sparse
from torch import Tensor, nn

from setattn.domains.fingerprints import BITS, COUNT_CAP
from setattn.molprop.kernel import loo_fits, solve

__all__ = ["FP_RIDGES", "FingerprintRidge", "dense_minmax_kernel", "minmax_kernel",
           "stack_weights"]

FP_RIDGES = (0.01, 0.03, 0.1, 0.3, 1.0)  # the kernel is 1 on its diagonal
BLOCK = 2048  # rows of the kernel computed at a time


def _unary(counts: Tensor) -> sparse.csr_matrix:
    """(G, F * COUNT_CAP) 0/1 sparse matrix: count c of slot j written as ones in columns
    j, F + j, ..., (c - 1) F + j, so that a row product counts sum_j min(a_j, b_j)."""
    c = counts.cpu().numpy()  # (G, F) uint8
    g, f = c.shape
    rows, slots = np.nonzero(c)  # (Z,), (Z,)
    n = c[rows, slots].astype(np.int64)  # (Z,) counts of the nonzero slots
    start = np.repeat(np.cumsum(n) - n, n)  # (U,) each unary one's first index in its run
    level = np.arange(int(n.sum())) - start  # (U,) 0 .. c - 1 within its slot
    cols = level * f + np.repeat(slots, n)  # (U,)
    ones = np.ones(len(cols), dtype=np.float64)
    return sparse.csr_matrix((ones, (np.repeat(rows, n), cols)), shape=(g, f * COUNT_CAP))


def _kernel_from(a: Tensor, a_unary: sparse.csr_matrix, b: Tensor,
                 b_unary_t: sparse.csc_matrix) -> Tensor:
    """(A, B) float64 MinMax kernel on the CPU from the counts and their unary forms, in
    blocks of ``BLOCK`` rows of a (the sparse product of a block is nearly dense)."""
    out = torch.empty(a.shape[0], b.shape[0], dtype=torch.float64, device="cpu")  # (A, B)
    size_a = a.sum(1, dtype=torch.float64).cpu()  # (A,)
    size_b = b.sum(1, dtype=torch.float64).cpu()  # (B,)
    for start in range(0, a.shape[0], BLOCK):
        stop = min(start + BLOCK, a.shape[0])
        shared = torch.from_numpy((a_unary[start:stop] @ b_unary_t).toarray())  # sum min
        union = size_a[start:stop, None] + size_b[None] - shared  # (A', B) sum max
        empty = union == 0  # two empty fingerprints are alike (1)
        block = out[start:stop]
        torch.div(shared, union.clamp_min_(1.0), out=block)
        block[empty] = 1.0
    return out


def dense_minmax_kernel(a: Tensor, b: Tensor) -> Tensor:
    """(A, B) MinMax kernel between real-valued counts a (A, F) and b (B, F), in a's
    dtype and differentiable in a: ``sum min = (|a| + |b| - |a - b|_1) / 2`` and
    ``sum max = (|a| + |b| + |a - b|_1) / 2``. Integrated gradients walks the counts from
    zero along this form; on whole counts it equals ``minmax_kernel``.

    Only the slots that some row of a sets enter the pairwise distance: where a is zero,
    ``|a - b| = b``, which is summed once per row of b."""
    b = b.to(a)
    used = a.detach().ne(0).any(0)  # (F,) slots set in some row of a
    b_used = b[:, used]  # (B, F')
    rest = b.sum(1) - b_used.sum(1)  # (B,) b's counts in slots a never sets
    l1 = torch.cdist(a[:, used], b_used, p=1) + rest[None]  # (A, B)
    total = a.sum(1)[:, None] + b.sum(1)[None]  # (A, B)
    union = total + l1  # twice sum max
    return torch.where(union > 0, (total - l1) / union.clamp_min(1e-12),
                       torch.ones((), dtype=a.dtype, device=a.device))  # (A, B)


def minmax_kernel(a: Tensor, b: Tensor) -> Tensor:
    """(A, B) float64 MinMax kernel between counts a (A, F) and b (B, F), on the CPU."""
    return _kernel_from(a, _unary(a), b, _unary(b).T.tocsc())


def stack_weights(loo_descriptor: Sequence[Tensor], loo_fingerprint: Sequence[Tensor]
                  ) -> list[float]:
    """Per task, the weight w in [0, 1] of the descriptor kernel ridge that minimises
    the mean of ``(w r_d + (1 - w) r_f)^2`` over its searched molecules, where r_d and
    r_f (L,) are the two fits' leave-one-out residuals (a residual of the stack is the
    stack of residuals)."""
    weights = []
    for r_d, r_f in zip(loo_descriptor, loo_fingerprint):
        gap = r_d - r_f  # (L,)
        denominator = float(gap.square().sum())
        w = -float((r_f * gap).sum()) / denominator if denominator > 0 else 1.0
        weights.append(min(max(w, 0.0), 1.0))
    return weights


class FingerprintRidge(nn.Module):
    """MinMax kernel ridge regression on count fingerprints, for T tasks.

    The training fingerprints (uint8) and the dual weights are buffers, saved and loaded
    with the ``state_dict``.

    Args:
        num_train: M, training molecules kept as kernel centres.
        num_tasks: T.
        bits: F, fingerprint slots.
    """

    def __init__(self, num_train: int, num_tasks: int, bits: int = BITS):
        super().__init__()
        self.register_buffer("centres", torch.zeros(num_train, bits, dtype=torch.uint8))  # (M, F)
        self.register_buffer("alpha", torch.zeros(num_train, num_tasks))  # (M, T)
        self.register_buffer("offset", torch.zeros(num_tasks))  # (T,)
        self.register_buffer("ridge", torch.tensor(FP_RIDGES[0], dtype=torch.float64))  # ()
        self._unary: tuple | None = None  # (digest, the centres in unary, transposed)

    def _centres_unary(self) -> sparse.csc_matrix:
        """The centres in unary, transposed (F * COUNT_CAP, M); kept until they change."""
        digest = hashlib.blake2b(self.centres.cpu().numpy().tobytes(),
                                 digest_size=16).hexdigest()
        if self._unary is None or self._unary[0] != digest:
            self._unary = (digest, _unary(self.centres).T.tocsc())
        return self._unary[1]

    @torch.no_grad()
    def fit(self, fingerprints: Tensor, y: Tensor, searched: Sequence[tuple[Tensor, bool]],
            ridges: Sequence[float] = FP_RIDGES) -> tuple[dict, list[Tensor]]:
        """Fit to the M training molecules; choose the ridge by leave-one-out.

        Args:
            fingerprints: (M, F) uint8 counts.
            y: (M, T) targets (standardised regression targets or 0/1 labels), NaN if
                missing.
            searched: per task, the rows (L,) of its ridge search and whether they are a
                sample of its labelled rows (``KernelRidge.searched``): a sampled task
                is then solved on all its labelled rows.
            ridges: the ridges to try (default ``FP_RIDGES``).

        Returns:
            ``({"ridge", "loo_rmse"}, residuals)``: the choice, with the leave-one-out
            error averaged over tasks as a mean squared error and rooted, and per task
            the (L,) leave-one-out residuals of the chosen ridge over its searched rows.
        """
        m = self.centres.shape[0]
        if fingerprints.shape != self.centres.shape or y.shape != (m, self.alpha.shape[1]):
            raise ValueError(f"FingerprintRidge.fit: expected fingerprints "
                             f"{tuple(self.centres.shape)} and targets ({m}, "
                             f"{self.alpha.shape[1]}), got {tuple(fingerprints.shape)} "
                             f"and {tuple(y.shape)}")
        self.centres.copy_(fingerprints)
        kernel = _kernel_from(self.centres, _unary(self.centres), self.centres,
                              self._centres_unary())  # (M, M)
        y = y.cpu().double()
        offsets, per_task = [], []
        for t, (rows, _) in enumerate(searched):
            rows = rows.cpu()
            offsets.append(float(y[rows, t].mean()))
            per_task.append(loo_fits(kernel[rows][:, rows], y[rows, t] - offsets[t], ridges))
        # the ridge whose leave-one-out error, averaged over tasks, is least
        errors = [sum(fits[r][0] for fits in per_task) / len(per_task)
                  for r in range(len(ridges))]
        best = int(np.argmin(errors))
        self.alpha.zero_()
        for t, ((rows, sampled), fits) in enumerate(zip(searched, per_task)):
            alpha = fits[best][2]  # (L,)
            if sampled:  # searched on a sample: solved on every label
                rows = (~torch.isnan(y[:, t])).nonzero()[:, 0]  # (L,)
                alpha = solve(kernel[rows][:, rows], y[rows, t] - offsets[t], ridges[best])
            self.alpha[rows.to(self.alpha.device), t] = alpha.to(self.alpha)
        self.offset.copy_(torch.tensor(offsets, device=self.offset.device))
        self.ridge.fill_(ridges[best])
        info = {"ridge": ridges[best], "loo_rmse": float(errors[best]) ** 0.5}
        return info, [fits[best][3] for fits in per_task]

    def forward(self, fingerprints: Tensor) -> Tensor:
        """Args:
            fingerprints: (G, F) counts: uint8 (a sparse product), or floating point
                (``dense_minmax_kernel``, differentiable: for integrated gradients).

        Returns:
            (G, T) float64 predictions, on the centres' device.
        """
        if fingerprints.is_floating_point():
            kernel = dense_minmax_kernel(fingerprints.double(), self.centres)  # (G, M)
        else:
            kernel = _kernel_from(fingerprints, _unary(fingerprints), self.centres,
                                  self._centres_unary())  # (G, M) on the CPU
        out = kernel.to(self.alpha.device) @ self.alpha.double()  # (G, T)
        return out + self.offset.double()
