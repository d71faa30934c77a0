"""Process-wide settings of the ``setattn`` command, made here and nowhere in the library.

The library never changes process-global state (thread counts, the allocator, warning
filters); a program that imports it keeps its own. The command line is a program of
its own, so it sets what suits molecule training on a shared CPU.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
import warnings

import torch

__all__ = ["DEFAULT_THREADS", "GRACE_SECONDS", "end_on_sigterm", "end_when_stuck",
           "keep_freed_memory", "one_thread", "set_up"]

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


GRACE_SECONDS = 5.0
"""How long a command may take to end after SIGTERM or Ctrl-C before ``end_when_stuck``
ends it outright."""

_WATCHED: list[threading.Thread] = []  # the watchdog of this process, once started


def _forget_wakeup() -> None:
    """In a forked child: signals there are the child's own, not this watchdog's."""
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # not the main thread (cannot happen right after a fork)
        pass


def _watch(read: int) -> None:
    """Wait for a SIGTERM or SIGINT byte; end the process ``GRACE_SECONDS`` later."""
    while True:
        data = os.read(read, 64)
        if not data:
            return
        signums = [s for s in data if s in (signal.SIGTERM, signal.SIGINT)]
        if not signums:
            continue
        time.sleep(GRACE_SECONDS)  # the main thread ends the command first, if it can
        name = signal.Signals(signums[0]).name
        sys.stderr.write(f"setattn: still running {GRACE_SECONDS:g} s after {name} (inside a "
                         f"call that cannot be interrupted); ending now\n")
        sys.stderr.flush()
        os._exit(128 + signums[0])


def end_when_stuck() -> bool:
    """End the process ``GRACE_SECONDS`` after a SIGTERM or SIGINT that the main thread
    has not acted on by then.

    Python runs a signal handler only between two bytecodes of the main thread, so one
    long call into C (a kernel ridge's eigendecomposition of 20,000 molecules, minutes)
    holds the signal until it returns. A watchdog thread, woken through
    ``signal.set_wakeup_fd`` while the call runs (torch releases the GIL), ends the
    process then (``os._exit``, status 128 + the signal). Forked children forget the
    wakeup descriptor, so their signals never end this process. Nothing is done where
    the descriptor is already someone else's (an event loop's) or off the main thread.

    Returns:
        Whether a watchdog runs (started now or before).
    """
    if _WATCHED:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    if previous != -1:  # someone else's: give it back
        signal.set_wakeup_fd(previous, warn_on_full_buffer=False)
        os.close(read)
        os.close(write)
        return False
    os.register_at_fork(after_in_child=_forget_wakeup)
    thread = threading.Thread(target=_watch, args=(read,), name="setattn-watchdog",
                              daemon=True)
    thread.start()
    _WATCHED.append(thread)
    return True


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
    if command in ("train", "predict", "explain"):  # serve ends as its server decides
        end_when_stuck()
    if command == "train":
        keep_freed_memory()
