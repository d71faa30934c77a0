"""Process-wide settings of the ``setattn`` command, made here and nowhere in the library.

The library never changes process-global state (thread counts, the allocator, warning
filters); a program that imports it keeps its own. The command line is a program of
its own, so it sets what suits molecule training on a shared CPU.
"""

from __future__ import annotations

import ctypes
import signal
import threading
import warnings

import torch

__all__ = ["DEFAULT_THREADS", "end_on_sigterm", "keep_freed_memory", "one_thread", "set_up"]

DEFAULT_THREADS = 1
"""torch CPU threads unless ``--num-threads`` says otherwise: molecule batches are small
(a few hundred atoms) and gain nothing from more threads on a shared CPU (the
measurements: ``docs/guide/defaults.rst``)."""

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep freed memory for reuse instead of handing it back to the OS.

    Every training step allocates and frees the same megabytes of tensors. By default
    glibc returns blocks above its mmap threshold, and the top of the heap, to the kernel
    when they are freed, so the next step page-faults them in again. The process then
    keeps up to its peak heap size allocated. Does nothing where ``mallopt`` is missing
    (not glibc).

    Returns:
        Whether both settings were applied.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # blocks up to 32 MB (glibc's largest threshold) come from the heap, which is
    # trimmed only when 256 MB at its top are free
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(
        mallopt(_M_TRIM_THRESHOLD, 256 << 20))


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def end_on_sigterm() -> None:
    """End on SIGTERM (``kill``, ``timeout``) as on an exception: files being written are
    removed, not left half-made, a run directory's lock is released and ``train`` saves
    its last finished epoch. Only the main thread can set a signal handler."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)


def one_thread() -> None:
    """A worker process's set-up: one torch thread, so N workers use N cores."""
    torch.set_num_threads(1)


def set_up(command: str, num_threads: int) -> None:
    """The process settings of one ``setattn`` command.

    Args:
        command: "train", "predict" or "explain"; training also keeps freed memory.
        num_threads: torch CPU threads.
    """
    torch.set_num_threads(num_threads)
    # the sparse engine uses torch's CSR kernels on purpose; their "beta" notice is noise
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    end_on_sigterm()
    if command == "train":
        keep_freed_memory()
