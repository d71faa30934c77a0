"""Float32 matrix products through oneDNN instead of MKL, where that stays exact.

PyTorch sends float32 ``mm``, ``bmm`` and the products inside scaled dot-product
attention on the CPU to MKL, which takes a slower path on AMD CPUs: on the development
machine (AMD EPYC, AVX-512) oneDNN was twice as fast (``benchmarks/engine.py
--only-matmul`` prints both rates; git show 1bd1cfd:benchmarks/results/engine.md).
PyTorch routes float32 products to oneDNN only when
``torch.backends.mkldnn.matmul.fp32_precision`` is ``"bf16"``, a setting that also
*allows* oneDNN to round the inputs to bfloat16; whether it does depends on the CPU (it
does where AMX makes that faster). ``onednn_is_exact`` tests that on products whose
exact float32 result rounded inputs would change, and ``fast_float32_matmul`` switches
oneDNN on only when they came out exact.

Use it where shapes repeat (complete sets padded to one shape, fixed-size batches):
oneDNN prepares a kernel per new shape, so a molecule training loop, whose every batch
has its own atom count, got slower with it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# (M, K, N) products the probe checks: projections of a few hundred rows, few input
# features, and one large product
_PROBE_SHAPES = ((319, 128, 128), (128, 319, 128), (943, 15, 128), (32, 462, 128),
                 (512, 512, 512))
# 1 + 2^-12 is a float32 but not a bfloat16 (8 significant bits): rounded, it is 1
_OFF_BFLOAT16 = 1.0 + 2.0**-12


def _backend():
    """``torch.backends.mkldnn.matmul`` when this PyTorch has the setting and oneDNN."""
    if not torch.backends.mkldnn.is_available():
        return None
    backend = getattr(torch.backends.mkldnn, "matmul", None)
    return backend if hasattr(backend, "fp32_precision") else None


def _probe_exact() -> bool:
    """Whether the products of ``_PROBE_SHAPES`` (plain, transposed, with a bias, and
    batched) are exact under the current setting. Every exact sum here has fewer than
    24 significant bits, so float32 arithmetic gets it exactly; bfloat16 inputs would not."""
    for m, k, n in _PROBE_SHAPES:
        a = torch.full((m, k), _OFF_BFLOAT16)  # (M, K)
        b = (torch.arange(k * n) % 3).float().view(k, n)  # (K, N) in {0, 1, 2}
        want = (a.double() @ b.double()).float()  # (M, N), exact in float32
        got = (a @ b, (b.t() @ a.t()).t(), torch.addmm(torch.ones(n), a, b) - 1,
               torch.bmm(a[None], b[None])[0])
        if not all(torch.equal(g, want) for g in got):
            return False
    return True


@functools.cache
def onednn_is_exact() -> bool:
    """Whether oneDNN computes float32 products from the float32 inputs on this CPU
    (probed once per process; False when PyTorch lacks the setting or oneDNN)."""
    backend = _backend()
    if backend is None:
        return False
    before = backend.fp32_precision
    backend.fp32_precision = "bf16"
    try:
        return _probe_exact()
    finally:
        backend.fp32_precision = before


@contextmanager
def fast_float32_matmul(enabled: bool = True) -> Iterator[bool]:
    """Inside the block, float32 products on the CPU go through oneDNN when
    ``onednn_is_exact``; the previous setting comes back on exit.

    Args:
        enabled: False leaves the setting alone.

    Yields:
        Whether oneDNN is on inside the block.
    """
    backend = _backend()
    if not enabled or backend is None or not onednn_is_exact():
        yield False
        return
    before = backend.fp32_precision
    backend.fp32_precision = "bf16"
    try:
        yield True
    finally:
        backend.fp32_precision = before
