"""The kernel part of the molecule model: kernel ridges on descriptors and fingerprints.

On small regression sets a smooth function of a molecule's descriptors is hard to beat.
The kernel part holds two kernel ridge regressions fitted in closed form on the training
molecules, and stacks them:

- ``KernelRidge`` on standardised RDKit 2D descriptors::

      z = clamp((d - mean) / std, -5, 5)             standardised descriptors (G, F)
      k(z, z') = exp(-gamma / F * |z - z'|^2)         RBF kernel, or
      k(z, z') = exp(-gamma / F * |z - z'|_1)         Laplacian kernel
      f_t(z) = sum_m k(z, z_m) alpha_mt + offset_t    one function per task t

  ``alpha_t = (K + lam I)^-1 (y_t - offset_t)`` over the training molecules that have a
  label for task t. The kernel, ``gamma`` and ``lam`` are chosen from a small grid
  (``GRID``, ``RIDGES``) by exact leave-one-out error, which for kernel ridge is
  ``alpha_i / [(K + lam I)^-1]_ii`` (no refitting), so the choice sees the training
  molecules only. The search costs one eigendecomposition per gamma and task, so a task
  with more than ``SEARCH_SIZE`` labelled molecules is searched on that many drawn at
  random (a generator of its own, so no other random stream moves) and its weights are
  then solved on all of them by one Cholesky factorisation.
- ``FingerprintRidge`` on Morgan count fingerprints (``setattn.domains.fingerprints``),
  with the MinMax (count Tanimoto) kernel
  ``k(a, b) = sum_j min(a_j, b_j) / sum_j max(a_j, b_j)``: positive definite, 1 on the
  diagonal, no width to choose. ``sum_j min(a_j, b_j)`` is the number of shared ones of
  the counts written in unary, so the kernel of two sets is one sparse matrix product
  (``_unary``). Its ridge is chosen by leave-one-out on the rows the descriptor ridge
  searched.
- ``VectorRidge``: a ``KernelRidge`` (the same grid and search) on the molecule vectors
  of a frozen pretrained encoder (``MoleculeNetwork.encode``: 2 D numbers read from the
  atom graph), which it holds and runs on each batch.
- ``KernelPart`` fits the descriptor and fingerprint ridges and stacks them per task,
  ``w descriptor + (1 - w) fingerprint``, with w the least-squares weight of their
  leave-one-out residuals (``setattn.molprop.stacking.stack_weight``, unshrunk); with an
  encoder it then stacks that pair with the vector ridge the same way,
  ``v pair + (1 - v) vectors``, on the pair's and the vector ridge's leave-one-out
  residuals. ``KernelPart.fit`` does it all from a list of training molecules.

``KernelRidge.posterior_std`` reads the fitted descriptor ridge as a Gaussian process:
how far a molecule's descriptors lie from the training molecules',
``sqrt(1 - k^T (K + lam I)^-1 k)`` on at most ``SPREAD_SIZE`` of the centres. The
prediction intervals of regression runs are scaled by it (``setattn.molprop.conformal``).

Outputs are in the units the kernel part was fitted to: standardised targets
(regression) or scores fitted to the 0/1 labels (classification).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy import sparse
from torch import Tensor, nn
from torch_geometric.data import Data
from tqdm import tqdm

from setattn.domains.fingerprints import BITS, COUNT_CAP
from setattn.molprop.batching import batches
from setattn.molprop.config import NetworkConfig
from setattn.molprop.network import MoleculeNetwork
from setattn.molprop.stacking import stack_weight

__all__ = ["FP_RIDGES", "GRID", "RIDGES", "SCORE_EPS", "FingerprintRidge", "KernelConfig",
           "KernelPart", "KernelRidge", "VectorRidge", "dense_minmax_kernel", "loo_fits",
           "minmax_kernel"]

SCORE_EPS = 1e-4
"""A classification kernel part's scores are clamped to [SCORE_EPS, 1 - SCORE_EPS]."""

GAMMAS = (0.1, 0.25, 0.5, 1.0)  # gamma / F scales a squared distance summed over F descriptors
RIDGES = (0.003, 0.01, 0.03, 0.1)
RBF = 2  # the kernel's distance: squared Euclidean, exp(-gamma / F * |z - z'|_2^2)
LAPLACIAN = 1  # the kernel's distance: L1, exp(-gamma / F * |z - z'|_1)
LAPLACIAN_GAMMAS = (0.2, 0.4, 0.8, 1.6, 3.2)  # gamma / F scales an L1 distance over F
# the (distance, gammas) pairs the leave-one-out search tries: the least error picks the
# kernel too
GRID = ((RBF, GAMMAS), (LAPLACIAN, LAPLACIAN_GAMMAS))
KERNEL_NAMES = {RBF: "rbf", LAPLACIAN: "laplacian"}
CLIP = 5.0  # standardised descriptors beyond this many standard deviations are clipped
SEARCH_SEED = 0  # of the generator that draws the molecules a capped search sees
SEARCH_SIZE = 2000  # the most labelled molecules per task the leave-one-out search sees
SPREAD_SIZE = 2000  # the most centres the posterior std is computed from
SPREAD_SEED = 0  # of the generator that draws them when there are more
SPREAD_BLOCK = 4096  # molecules per block of the posterior std (about 64 KB of memory each)


def _squared_distances(a: Tensor, b: Tensor) -> Tensor:
    """(A, B) squared Euclidean distances between the rows of a (A, F) and b (B, F)."""
    d = a.square().sum(1)[:, None] + b.square().sum(1)[None] - 2 * a @ b.T  # (A, B)
    return d.clamp_min(0.0)


def _distances(a: Tensor, b: Tensor, norm: int) -> Tensor:
    """(A, B) the kernel's distances between the rows of a (A, F) and b (B, F): squared
    Euclidean (``RBF``) or L1 (``LAPLACIAN``)."""
    if norm == RBF:
        return _squared_distances(a, b)
    if norm == LAPLACIAN:
        return torch.cdist(a, b, p=1)  # (A, B)
    raise ValueError(f"kernel distance must be {RBF} (RBF) or {LAPLACIAN} (Laplacian), "
                     f"got {norm}")


def eigh(kernel: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (L,) ascending and eigenvectors (L, L) of a symmetric (L, L) float64
    kernel. On the CPU through SciPy's LAPACK (the divide-and-conquer driver, as
    ``torch.linalg.eigh``) at torch's thread count: 1.4-1.7x faster than torch's on one
    core for L of 500 to 2,000, the same decomposition to float64 rounding."""
    if kernel.device.type != "cpu":
        return torch.linalg.eigh(kernel)
    from scipy.linalg import eigh as lapack_eigh
    from threadpoolctl import threadpool_limits

    with threadpool_limits(torch.get_num_threads(), user_api="blas"):
        eigval, eigvec = lapack_eigh(kernel.numpy(), driver="evd", check_finite=False)
    return torch.from_numpy(eigval), torch.from_numpy(eigvec)


def loo_fits(kernel: Tensor, y: Tensor, ridges: Sequence[float] = RIDGES
             ) -> list[tuple[float, float, Tensor, Tensor]]:
    """Leave-one-out mean squared error, dual weights and residuals for every ridge.

    Args:
        kernel: (L, L) float64 kernel of the labelled molecules.
        y: (L,) float64 centred targets.
        ridges: the ridges to try (default ``RIDGES``).

    Returns:
        One (loo_mse, ridge, alpha (L,), residuals (L,)) per ridge: residual i is y_i
        minus its prediction by the fit without molecule i.
    """
    eigval, eigvec = eigh(kernel)  # (L,), (L, L): the one O(L^3) step
    coef = eigvec.T @ y  # (L,) the targets in the eigenbasis
    weights = eigvec.square()  # (L, L): diag(V D V^T) = weights @ diag(D)
    fits = []
    for ridge in ridges:  # O(L^2) each: (K + lam I)^-1 = V diag(1 / (eigval + lam)) V^T
        inverse = 1.0 / (eigval + ridge)  # (L,) its eigenvalues
        alpha = eigvec @ (inverse * coef)  # (L,)
        loo = alpha / (weights @ inverse)  # (L,) y_i minus its prediction without i
        fits.append((float(loo.square().mean()), ridge, alpha, loo))
    return fits


def _search_rows(labelled: Tensor, search_size: int | None, generator: torch.Generator
                 ) -> tuple[Tensor, bool]:
    """(rows of the search (L',), whether they are a sample): a task's labelled rows, or
    ``search_size`` of them drawn at random (sorted) when it has more."""
    rows = labelled.nonzero()[:, 0]  # (L,)
    if search_size is None or len(rows) <= search_size:
        return rows, False
    chosen = torch.randperm(len(rows), generator=generator, device="cpu")[:search_size]  # (S,)
    return rows[chosen.sort().values.to(rows.device)], True


def _labelled(y: Tensor, names: Sequence[str] | None) -> list[Tensor]:
    """T (M,) masks of the labelled rows of (M, T) targets; a ValueError names a task
    without any label."""
    labelled = [~torch.isnan(y[:, t]) for t in range(y.shape[1])]  # T x (M,)
    for t, mask in enumerate(labelled):
        if not bool(mask.any()):
            task = f"target column {names[t]!r}" if names else f"task {t}"
            raise ValueError(f"{task} has no label in the training part (no training "
                             f"label for the kernel ridge; use --kernel-ridge off, or "
                             f"another split)")
    return labelled


def solve(kernel: Tensor, y: Tensor, ridge: float) -> Tensor:
    """(L,) dual weights ``(K + ridge I)^-1 y`` of an (L, L) float64 kernel, by Cholesky."""
    factor = torch.linalg.cholesky(kernel + ridge * torch.eye(len(y), dtype=kernel.dtype,
                                                                device=kernel.device))
    return torch.cholesky_solve(y[:, None], factor)[:, 0]  # (L,)


class KernelRidge(nn.Module):
    """RBF kernel ridge regression on descriptors, for T tasks (NaN labels skipped).

    The training descriptors and the dual weights are buffers, so a fitted model is
    saved and loaded with its ``state_dict``.

    Args:
        num_train: M, training molecules kept as kernel centres.
        num_features: F, descriptors per molecule.
        num_tasks: T.
    """

    def __init__(self, num_train: int, num_features: int, num_tasks: int):
        super().__init__()
        self.register_buffer("centres", torch.zeros(num_train, num_features))  # (M, F)
        self.register_buffer("alpha", torch.zeros(num_train, num_tasks))  # (M, T)
        self.register_buffer("offset", torch.zeros(num_tasks))  # (T,)
        self.register_buffer("mean", torch.zeros(num_features))  # (F,)
        self.register_buffer("std", torch.ones(num_features))  # (F,)
        self.register_buffer("gamma", torch.tensor(GAMMAS[0], dtype=torch.float64))  # ()
        self.register_buffer("ridge", torch.tensor(RIDGES[0], dtype=torch.float64))  # ()
        self.register_buffer("norm", torch.tensor(float(RBF), dtype=torch.float64))  # ()
        self._spread: tuple | None = None  # posterior_std's (key, centres, factor)
        # set by ``fit``: per task, the searched rows (L,) with whether they are a sample,
        # and the chosen fit's leave-one-out residuals (L,) (for the fingerprint stack)
        self.searched: list[tuple[Tensor, bool]] = []
        self.loo_residuals: list[Tensor] = []

    def _standardise(self, d: Tensor) -> Tensor:
        return ((d - self.mean) / self.std).clamp(-CLIP, CLIP)  # (G, F)

    @torch.no_grad()
    def fit(self, descriptors: Tensor, y: Tensor, names: Sequence[str] | None = None,
            progress: bool = False, search_size: int | None = SEARCH_SIZE,
            grid: Sequence[tuple[int, Sequence[float]]] = GRID,
            ridges: Sequence[float] = RIDGES) -> dict:
        """Fit to the M training molecules; choose gamma and the ridge by leave-one-out.

        Args:
            descriptors: (M, F) raw descriptors.
            y: (M, T) targets (in the units ``forward`` should predict), NaN if missing.
            names: the T target column names, for errors (task numbers without them).
            progress: show a progress bar over the gammas on a terminal (one
                eigendecomposition of an (L, L) matrix per gamma and task, L the task's
                searched molecules).
            search_size: S, the most labelled molecules a task's leave-one-out search
                sees (None: all); a task with more is searched on S drawn at random and
                solved on all of them.
            grid: the (distance, gammas) pairs to search: ``RBF`` or ``LAPLACIAN``, each
                with its gammas (default ``GRID``).
            ridges: the ridges to search with every gamma (default ``RIDGES``).

        Returns:
            ``{"kernel", "gamma", "ridge", "loo_rmse"}`` of the choice (kernel "rbf" or
            "laplacian"; loo_rmse averaged over tasks as a mean squared error, then
            rooted; over the searched molecules).

        Raises:
            ValueError: if the shapes differ from the module's, or naming a task without
                any label.
        """
        m, f = self.centres.shape
        if descriptors.shape != (m, f) or y.shape != (m, self.alpha.shape[1]):
            raise ValueError(f"KernelRidge.fit: expected descriptors ({m}, {f}) and targets "
                             f"({m}, {self.alpha.shape[1]}), got {tuple(descriptors.shape)} "
                             f"and {tuple(y.shape)}")
        device = self.centres.device  # the data may live elsewhere than the module
        descriptors, y = descriptors.to(device), y.to(device)
        x = descriptors.double()  # (M, F)
        self.mean.copy_(x.mean(0))
        self.std.copy_(x.std(0).nan_to_num(1.0).clamp_min(1e-6))
        z = self._standardise(x.to(self.mean.dtype)).double()  # (M, F)
        self.centres.copy_(z)
        labelled = _labelled(y, names)  # T x (M,)
        offsets = [float(y[mask, t].double().mean()) for t, mask in enumerate(labelled)]
        generator = torch.Generator().manual_seed(SEARCH_SEED)
        searched = [_search_rows(mask, search_size, generator) for mask in labelled]
        best = None  # (mean loo mse, norm, gamma, ridge, alphas per task)
        steps = [(norm, gamma) for norm, gammas in grid for gamma in gammas]
        bar = tqdm(steps, desc=f"kernel ridge on {m:,} molecules", unit="gamma",
                   leave=False, disable=None if progress else True)
        distances, norm_of = None, None  # one (M, M) distance matrix at a time
        for norm, gamma in bar:
            if norm != norm_of:
                distances, norm_of = None, norm  # free the last one first
                distances = _distances(z, z, norm)  # (M, M)
            per_task = [loo_fits(torch.exp(-gamma / f * distances[rows][:, rows]),
                                  y[rows, t].double() - offsets[t], ridges)
                        for t, (rows, _) in enumerate(searched)]  # T x [(mse, ridge, alpha)]
            for r, ridge in enumerate(ridges):
                mse = sum(fits[r][0] for fits in per_task) / len(per_task)
                if best is None or mse < best[0]:
                    best = (mse, norm, gamma, ridge, [fits[r][2] for fits in per_task],
                            [fits[r][3] for fits in per_task])
        mse, norm, gamma, ridge, alphas, self.loo_residuals = best
        self.searched = searched
        if any(sampled for _, sampled in searched) and norm != norm_of:
            distances = _distances(z, z, norm)  # (M, M) the chosen kernel's
        self.alpha.zero_()
        for t, ((rows, sampled), alpha) in enumerate(zip(searched, alphas)):
            if sampled:  # searched on a sample: the chosen pair solved on every label
                rows = labelled[t].nonzero()[:, 0]  # (L,)
                alpha = solve(torch.exp(-gamma / f * distances[rows][:, rows]),
                               y[rows, t].double() - offsets[t], ridge)  # (L,)
            self.alpha[rows, t] = alpha.to(self.alpha.dtype)
        self.offset.copy_(torch.tensor(offsets, device=device))
        self.gamma.fill_(gamma)
        self.ridge.fill_(ridge)
        self.norm.fill_(float(norm))
        return {"kernel": KERNEL_NAMES[norm], "gamma": gamma, "ridge": ridge,
                "loo_rmse": math.sqrt(mse)}

    def _between(self, a: Tensor, b: Tensor) -> Tensor:
        """(A, B) the fitted kernel between standardised descriptors a (A, F) and b (B, F)."""
        return torch.exp(-float(self.gamma) / a.shape[1] * _distances(a, b, int(self.norm)))

    def posterior_factor(self) -> tuple[Tensor, Tensor]:
        """The posterior std's centres (S, F) and the lower Cholesky factor (S, S) of their
        kernel plus the ridge, float64. Computed once per fitted state and kept (a
        ``predict`` command computes it before its worker processes fork); a digest of
        the centres' bytes, the kernel and the ridge tell a refit or a new
        ``state_dict`` apart."""
        digest = hashlib.blake2b(self.centres.detach().cpu().numpy().tobytes(),
                                 digest_size=16).hexdigest()
        key = (str(self.centres.device), tuple(self.centres.shape), float(self.gamma),
               float(self.ridge), int(self.norm), digest)
        if self._spread is None or self._spread[0] != key:
            centres = self.centres.double()  # (M, F)
            if len(centres) > SPREAD_SIZE:
                generator = torch.Generator().manual_seed(SPREAD_SEED)
                pick = torch.randperm(len(centres), generator=generator,
                                      device="cpu")[:SPREAD_SIZE]  # (S,)
                centres = centres[pick.sort().values.to(centres.device)]  # (S, F)
            kernel = self._between(centres, centres)  # (S, S)
            kernel += float(self.ridge) * torch.eye(len(centres), dtype=kernel.dtype,
                                                    device=kernel.device)
            self._spread = (key, centres, torch.linalg.cholesky(kernel))
        return self._spread[1], self._spread[2]

    @torch.no_grad()
    def posterior_std(self, descriptors: Tensor) -> Tensor:
        """The kernel ridge's Gaussian-process posterior standard deviation, in units of
        the prior's (between 0 and 1). It is one value per molecule for every task,
        computed from all centres, also where a task's weights were solved on its
        labelled molecules only.

        Args:
            descriptors: (G, F) raw descriptors.

        Returns:
            (G,) ``sqrt(1 - k^T (K + lam I)^-1 k)``, float32, with ``k`` (S,) the kernel
            between a molecule and S = min(M, ``SPREAD_SIZE``) centres (drawn at random
            with seed ``SPREAD_SEED`` when M is larger) and ``K`` (S, S) theirs; in
            blocks of ``SPREAD_BLOCK`` molecules, so memory stays bounded.
        """
        centres, factor = self.posterior_factor()  # (S, F), (S, S)
        out = []
        for block in descriptors.split(SPREAD_BLOCK):
            z = self._standardise(block.to(self.mean.device)).double()  # (B, F)
            cross = self._between(z, centres)  # (B, S)
            v = torch.linalg.solve_triangular(factor, cross.T, upper=False)  # (S, B)
            out.append((1 - v.square().sum(0)).clamp_min(0).sqrt().float())  # (B,)
        return torch.cat(out) if out else torch.zeros(0, device=self.mean.device)  # (G,)

    def forward(self, descriptors: Tensor) -> Tensor:
        """The kernel is computed in float64: in float32 the distances' cancellation
        (``|a|^2 + |b|^2 - 2 a.b``) and the matrix products' blocking, which depends on how
        many molecules come together, made a molecule's prediction depend on its batch
        (by about 1e-4 of the target's spread).

        Args:
            descriptors: (G, F) raw descriptors.

        Returns:
            (G, T) predictions, in the dtype of ``descriptors``.
        """
        z = self._standardise(descriptors).double()  # (G, F)
        f = self.centres.shape[1]
        d = _distances(z, self.centres.double(), int(self.norm))  # (G, M)
        kernel = torch.exp(-float(self.gamma) / f * d)  # (G, M)
        out = kernel @ self.alpha.double() + self.offset.double()  # (G, T)
        return out.to(descriptors.dtype)


FP_RIDGES = (0.01, 0.03, 0.1, 0.3, 1.0)  # the fingerprint kernel is 1 on its diagonal
BLOCK = 2048  # rows of the fingerprint kernel computed at a time


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


VECTOR_BATCH = 256  # molecules per batch of the encoder's vectors


class VectorRidge(nn.Module):
    """A ``KernelRidge`` on the molecule vectors of a frozen encoder, for T tasks.

    The encoder is a ``MoleculeNetwork`` whose ``encode`` gives (G, 2 D) vectors from the
    atom graph; its head is never read. It is held here (its weights saved with the
    part's ``state_dict``), kept in eval mode and never trained.

    Args:
        num_train: M, training molecules kept as kernel centres.
        encoder: the encoder network (its weights loaded by the caller).
        num_tasks: T.
    """

    def __init__(self, num_train: int, encoder: MoleculeNetwork, num_tasks: int):
        super().__init__()
        self.encoder = encoder.eval().requires_grad_(False)
        self.ridge = KernelRidge(num_train, 2 * encoder.config.hidden, num_tasks)

    def train(self, mode: bool = True) -> VectorRidge:
        """The ridge follows ``mode``; the encoder stays in eval mode (no dropout)."""
        super().train(mode)
        self.encoder.eval()
        return self

    def vectors(self, batch) -> Tensor:
        """(G, 2 D) the encoder's vectors of a batch (differentiable in its inputs)."""
        return self.encoder.encode(batch)

    @torch.no_grad()
    def fit(self, train: Sequence[Data], y: Tensor, names: Sequence[str] | None = None,
            **search: object) -> dict:
        """Fit the ridge to the vectors of M training molecules (``KernelRidge.fit``,
        with ``search``'s ``grid``, ``ridges`` or ``search_size``).

        Args:
            train: the M molecules (atom graphs, as the networks read them).
            y: (M, T) targets, NaN where missing.
            names: the target columns, for errors.

        Returns:
            ``KernelRidge.fit``'s choice.
        """
        device = self.ridge.centres.device
        vectors = torch.cat([self.vectors(b.to(device))
                             for b in batches(train, VECTOR_BATCH)])  # (M, 2 D)
        return self.ridge.fit(vectors, y, names, **search)

    def forward(self, batch) -> Tensor:
        """(G, T) predictions for a batch, float32."""
        return self.ridge(self.vectors(batch))


@dataclass
class KernelConfig:
    """Everything needed to rebuild a ``KernelPart`` (saved with it as JSON).

    Attributes:
        size: M, the training molecules kept as kernel centres.
        descriptor_dim: F, descriptors per molecule.
        num_tasks: T.
        task: "regression" (outputs: standardised targets) or "classification"
            (outputs: scores fitted to the 0/1 labels).
        fingerprints: stack a fingerprint kernel ridge with the descriptor one;
            molecules then need ``fingerprint`` (G, BITS) counts.
        vectors: the ``NetworkConfig`` (as a dict) of a pretrained encoder whose
            molecule vectors a ``VectorRidge`` regresses on, stacked with the descriptor
            and fingerprint ridges; None: no vector ridge.
    """

    size: int
    descriptor_dim: int
    num_tasks: int
    task: str = "regression"
    fingerprints: bool = False
    vectors: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def encoder_config(self) -> NetworkConfig | None:
        """``vectors`` as a checked ``NetworkConfig`` (None without a vector ridge).

        Raises:
            ValueError: ``vectors`` is not a dict, or names a setting that is unknown or
                out of range (checked before any network is built).
        """
        if self.vectors is None:
            return None
        if not isinstance(self.vectors, dict):
            raise ValueError("vectors must name an encoder's settings")
        config = NetworkConfig.from_dict(self.vectors, "the vector ridge's encoder")
        config.validate()
        return config

    def encoder(self) -> MoleculeNetwork | None:
        """A fresh encoder network of ``vectors``' architecture (None without one).

        Raises:
            ValueError: as ``encoder_config``.
        """
        config = self.encoder_config()
        return None if config is None else MoleculeNetwork(config)


class KernelPart(nn.Module):
    """The descriptor kernel ridge and, with ``config.fingerprints``, the fingerprint
    one, stacked per task by the (T,) buffer ``mix`` (the descriptor ridge's weight);
    with ``config.vectors``, that pair stacked with a ``VectorRidge`` by the (T,) buffer
    ``vector_mix`` (the pair's weight).

    Args:
        config: the sizes (``KernelConfig``); ``fit`` sets the weights (and, with
            vectors, the encoder's: ``fit`` is given the encoder, a checkpoint holds it).
    """

    def __init__(self, config: KernelConfig, encoder: MoleculeNetwork | None = None):
        super().__init__()
        self.config = c = config
        self.descriptor = KernelRidge(c.size, c.descriptor_dim, c.num_tasks)
        self.fingerprint = FingerprintRidge(c.size, c.num_tasks, BITS) if c.fingerprints else None
        if c.fingerprints:
            self.register_buffer("mix", torch.ones(c.num_tasks))  # (T,)
        self.vectors = None
        if c.vectors is not None:
            encoder = encoder if encoder is not None else c.encoder()
            self.vectors = VectorRidge(c.size, encoder, c.num_tasks)
            self.register_buffer("vector_mix", torch.ones(c.num_tasks))  # (T,)

    @classmethod
    def fit(cls, train: Sequence[Data], y: Tensor, config: KernelConfig,
            names: Sequence[str] | None = None, progress: bool = False,
            encoder: MoleculeNetwork | None = None, **search: object
            ) -> tuple[KernelPart, dict]:
        """The kernel part fitted to M training molecules.

        Args:
            train: the M molecules, with ``descriptors`` (1, F) and, with
                ``config.fingerprints``, ``fingerprint`` (1, BITS).
            y: (M, T) targets in the units the part predicts (standardised regression
                targets, or 0/1 labels), NaN where missing.
            config: the part's sizes (``config.size`` must be M).
            names: the target columns, for errors.
            progress: a progress bar over the descriptor ridge's search on a terminal.
            encoder: with ``config.vectors``, the pretrained encoder (its weights
                loaded; of that architecture) whose vectors the vector ridge reads.
            search: ``grid`` and ``ridges`` for ``KernelRidge.fit`` (its defaults
                without them).

        Returns:
            The fitted part and ``{"kernel", "gamma", "ridge", "loo_rmse",
            "seconds"}``, with fingerprints also ``"fingerprint"`` (its ``{"ridge",
            "loo_rmse"}``) and ``"descriptor_weight"`` (T floats), with vectors also
            ``"vectors"`` (the vector ridge's choice, as ``KernelRidge.fit``'s) and
            ``"vector_stack_weight"`` (T floats: the descriptor and fingerprint pair's
            weight against the vector ridge).

        Raises:
            ValueError: naming a target column without any training label, when the
                fingerprints are needed and missing, or when ``config.vectors`` and
                ``encoder`` disagree.
        """
        start = time.perf_counter()
        if (config.vectors is None) != (encoder is None) or (
                encoder is not None and encoder.config.to_dict() != config.vectors):
            raise ValueError("KernelPart.fit: pass the encoder exactly when config.vectors "
                             "names its architecture")
        part = cls(config, encoder)
        info = part.descriptor.fit(torch.cat([d.descriptors for d in train]), y, names,
                                   progress=progress, **search)
        residuals = part.descriptor.loo_residuals  # T x (L,): the stack so far
        if config.fingerprints:
            if any("fingerprint" not in d for d in train):
                raise ValueError("the fingerprint kernel ridge needs Morgan count "
                                 "fingerprints (featurise the molecules with them)")
            fp_info, fp_residuals = part.fingerprint.fit(
                torch.cat([d.fingerprint for d in train]), y, part.descriptor.searched)
            weights = [stack_weight(r_d, r_f, centre=1.0, shrink=False)
                       for r_d, r_f in zip(residuals, fp_residuals)]
            part.mix.copy_(torch.tensor(weights, device=part.mix.device))
            residuals = [w * r_d + (1 - w) * r_f
                         for w, r_d, r_f in zip(weights, residuals, fp_residuals)]
            info = {**info, "fingerprint": fp_info, "descriptor_weight": weights}
        if part.vectors is not None:
            vector_info = part.vectors.fit(train, y, names, **search)
            for (rows, _), (vector_rows, _) in zip(part.descriptor.searched,
                                                   part.vectors.ridge.searched):
                if not torch.equal(rows, vector_rows):  # the same generator draws both
                    raise RuntimeError("the vector ridge searched other molecules than "
                                       "the descriptor ridge")
            weights = [stack_weight(r, r_v, centre=1.0, shrink=False)
                       for r, r_v in zip(residuals, part.vectors.ridge.loo_residuals)]
            part.vector_mix.copy_(torch.tensor(weights, device=part.vector_mix.device))
            info = {**info, "vectors": vector_info, "vector_stack_weight": weights}
        return part, {**info, "seconds": time.perf_counter() - start}

    def uses_fingerprints(self) -> bool:
        """Whether predictions read the fingerprint ridge: the part has one and some
        task gives it weight (a stack that chose the descriptors alone skips it)."""
        return self.fingerprint is not None and bool((self.mix < 1).any())

    def uses_vectors(self) -> bool:
        """Whether predictions read the encoder's vectors: the part has a vector ridge
        and some task gives it weight."""
        return self.vectors is not None and bool((self.vector_mix < 1).any())

    def forward(self, batch) -> Tensor:
        """Args:
            batch: a PyG ``Batch`` (or ``Data``) with ``descriptors`` (G, F) and, where
                the part uses them, ``fingerprint`` (G, BITS) counts (uint8, or floats
                for integrated gradients); with a vector ridge, also the atom graph
                (``x``, ``edge_index``, ``edge_attr``, ``batch``) its encoder reads.

        Returns:
            (G, T) standardised targets (regression) or scores fitted to the 0/1 labels
            (classification), in the dtype of ``descriptors``.
        """
        out = self.descriptor(batch.descriptors)  # (G, T)
        if self.uses_fingerprints():
            if "fingerprint" not in batch:
                raise ValueError("this model stacks a fingerprint kernel ridge: its "
                                 "molecules need Morgan count fingerprints (featurise them "
                                 "with setattn.molprop.featurize, which adds them with "
                                 "descriptors)")
            fingerprint = self.fingerprint(batch.fingerprint).to(out)  # (G, T)
            out = self.mix * out + (1 - self.mix) * fingerprint  # (G, T)
        if self.uses_vectors():
            vectors = self.vectors(batch).to(out)  # (G, T)
            out = self.vector_mix * out + (1 - self.vector_mix) * vectors  # (G, T)
        return out

    def as_outputs(self, kernel_out: Tensor) -> Tensor:
        """(G, T) ``forward``'s outputs in the units of a network's forward pass: as they
        are (regression), or the logits of the scores clamped into (0, 1)
        (classification)."""
        if self.config.task == "regression":
            return kernel_out
        return torch.logit(kernel_out.clamp(SCORE_EPS, 1 - SCORE_EPS))  # (G, T)
