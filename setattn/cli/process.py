"""Process-wide settings of the ``setattn`` command, made here and nowhere in the library.

The library never changes process-global state (thread counts, the allocator, warning
filters); a program that imports it keeps its own. The command line is a program of
its own, so it sets what suits molecule training on a shared CPU.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch

__all__ = ["DEFAULT_THREADS", "GRACE_SECONDS", "command_done", "end_on_sigterm", "end_when_stuck",
           "exit_process", "hold_signal_handlers", "keep_freed_memory", "one_thread",
           "remove_generated_modules", "set_up"]

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
_RUNNING = threading.Event()  # a command is running: the watchdog may end the process


def _first_start(started: list[threading.Thread]) -> bool:
    """Whether to start a process-wide thread now: none started yet (``started``), and
    this is the main thread (only it may set signal handling)."""
    return not started and threading.current_thread() is threading.main_thread()


_FORK_SIGNALS = {signal.SIGTERM, signal.SIGINT}
_FORK_MASKS: list[set[signal.Signals]] = []  # the forking thread's mask while it forks


def _hold_for_fork() -> None:
    """Before a fork: the forking thread holds SIGTERM and SIGINT, and so does the child
    (it inherits the mask), until the child has forgotten the wakeup descriptor. A signal
    sent to the child before then would otherwise go through the descriptor the two
    share and wake this process's watchdog. Signals to this process meanwhile go to
    another thread, or wait until ``_release_after_fork``."""
    _FORK_MASKS.append(signal.pthread_sigmask(signal.SIG_BLOCK, _FORK_SIGNALS))


def _release_after_fork() -> None:
    """After a fork, in both processes: the mask as it was before the fork."""
    if _FORK_MASKS:
        signal.pthread_sigmask(signal.SIG_SETMASK, _FORK_MASKS.pop())


def _forget_wakeup() -> None:
    """In a forked child: signals there are the child's own, not this watchdog's (a held
    one is delivered now, once the descriptor is forgotten)."""
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # not the main thread (cannot happen right after a fork)
        pass
    _release_after_fork()


def _watch(read: int) -> None:
    """Wait for a SIGTERM or SIGINT byte; end the process ``GRACE_SECONDS`` later."""
    while True:
        data = os.read(read, 64)
        if not data:
            return
        signums = [s for s in data if s in (signal.SIGTERM, signal.SIGINT)]
        if not signums or not _RUNNING.is_set():
            continue
        time.sleep(GRACE_SECONDS)  # the main thread ends the command first, if it can
        if not _RUNNING.is_set():  # it did: nothing is stuck
            continue
        name = signal.Signals(signums[0]).name
        # to the process's own standard error, not ``sys.stderr``: that may be a buffer
        # (a test's capture) that dies with the process unread
        message = (f"setattn: still running {GRACE_SECONDS:g} s after {name} (inside a call "
                   f"that cannot be interrupted); ending now (pid {os.getpid()})\n")
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.write(2, message.encode())
        os._exit(128 + signums[0])


def command_done() -> None:
    """The command has ended: a signal from now on is no longer its to be stuck on (a
    program that runs commands in-process, a test, goes on)."""
    _RUNNING.clear()


def end_when_stuck() -> bool:
    """End the process ``GRACE_SECONDS`` after a SIGTERM or SIGINT that the main thread
    has not acted on by then, while the command runs (until ``command_done``).

    Python runs a signal handler only between two bytecodes of the main thread, so one
    long call into C (a kernel ridge's eigendecomposition of 20,000 molecules, minutes)
    holds the signal until it returns. A watchdog thread, woken through
    ``signal.set_wakeup_fd`` while the call runs (torch releases the GIL), ends the
    process then (``os._exit``, status 128 + the signal). Forked children forget the
    wakeup descriptor, holding SIGTERM and SIGINT until they have, so their signals
    never end this process. Nothing is done where
    the descriptor is already someone else's (an event loop's) or off the main thread.

    Returns:
        Whether a watchdog runs (started now or before).
    """
    _RUNNING.set()
    if not _first_start(_WATCHED):
        return bool(_WATCHED)
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    if previous != -1:  # someone else's: give it back
        signal.set_wakeup_fd(previous, warn_on_full_buffer=False)
        os.close(read)
        os.close(write)
        return False
    os.register_at_fork(before=_hold_for_fork, after_in_parent=_release_after_fork,
                        after_in_child=_forget_wakeup)
    thread = threading.Thread(target=_watch, args=(read,), name="setattn-watchdog",
                              daemon=True)
    thread.start()
    _WATCHED.append(thread)
    return True


_HELD: list[threading.Thread] = []  # the signal keeper of this process, once started
_HOLD_SECONDS = 0.2  # how often the keeper looks
_SIG_DFL, _SIG_IGN = 0, 1  # the C handler values of signal.h


def _c_handlers(signums: tuple[int, ...]) -> dict[int, ctypes.Array] | None:
    """Each signal's C-level ``struct sigaction``, as opaque bytes (None without libc's
    ``sigaction``)."""
    try:
        sigaction = ctypes.CDLL(None, use_errno=True).sigaction
    except (OSError, AttributeError):
        return None
    handlers = {}
    for signum in signums:
        buffer = ctypes.create_string_buffer(512)  # larger than any libc's struct
        if sigaction(signum, None, buffer) != 0:
            return None
        handlers[signum] = buffer
    return handlers


def _handler_address(action: ctypes.Array) -> int:
    """The handler of a ``struct sigaction`` (its first field on Linux and macOS)."""
    return ctypes.c_void_p.from_buffer(action).value or 0


def _hold(saved: dict[int, ctypes.Array]) -> None:
    """Put back the saved C handler of each signal whenever a foreign one replaced it."""
    sigaction = ctypes.CDLL(None, use_errno=True).sigaction
    ours = {signum: _handler_address(action) for signum, action in saved.items()}
    while True:
        time.sleep(_HOLD_SECONDS)
        now = _c_handlers(tuple(saved))
        if now is None:
            return
        for signum, action in now.items():
            if _handler_address(action) not in (ours[signum], _SIG_DFL, _SIG_IGN):
                sigaction(signum, saved[signum], None)


def hold_signal_handlers() -> bool:
    """Keep Python's own SIGINT and SIGTERM handling installed.

    RDKit's substructure search installs a SIGINT handler of its own while it runs and
    puts back the one it found; two searches in two threads at once leave RDKit's in
    place, after which Ctrl-C never reaches Python again. A daemon thread looks every
    ``_HOLD_SECONDS`` and puts Python's handler back when a foreign one (neither
    Python's nor the default or ignore) replaced it; a signal that arrived in between
    is lost, the next one is not. Call it from the main thread after the handlers are
    set; nothing is done elsewhere or without libc's ``sigaction``.

    Returns:
        Whether the keeper runs (started now or before).
    """
    if not _first_start(_HELD):
        return bool(_HELD)
    saved = _c_handlers((signal.SIGINT, signal.SIGTERM))
    if saved is None:
        return False
    thread = threading.Thread(target=_hold, args=(saved,), name="setattn-signals", daemon=True)
    thread.start()
    _HELD.append(thread)
    return True


_CLEANUP: list[int] = []  # the process whose exit removes PyG's files, once registered

_GENERATED = ("_propagate", "_edge_updater")
"""The endings of the modules PyG writes from its jinja templates (``torch_geometric.
template.module_from_template``): one ``<module>_<class>_propagate_*.py`` file in the
temporary folder per message-passing class, never removed by PyG."""


def remove_generated_modules(pid: int | None = None) -> list[Path]:
    """Remove the temporary files of PyG's generated modules that this process wrote.

    A module is PyG's when its name ends in ``_GENERATED`` and its file lies in the
    temporary folder named after it; the module stays loaded (its code is compiled),
    only the file goes.

    Args:
        pid: do nothing unless this is the current process's id (an exit handler
            inherited by a forked child leaves the parent's files alone).

    Returns:
        The files removed.
    """
    if pid is not None and pid != os.getpid():
        return []
    folder = Path(tempfile.gettempdir()).resolve()
    removed = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not name.endswith(_GENERATED) or not file:
            continue
        path = Path(file)
        if path.parent.resolve() == folder and path.name.startswith(f"{name}_") \
                and path.suffix == ".py":
            try:
                path.unlink()
            except OSError:
                continue
            removed.append(path)
    return removed


def one_thread() -> None:
    """A worker process's set-up: one torch thread, so N workers use N cores."""
    torch.set_num_threads(1)


_ENDS_AT_ONCE: list[str] = []  # the command set up, when its process ends at once


def exit_process(status: int) -> None:
    """End the ``setattn`` program with ``status``.

    A server's process ends at once once ``serve`` returns (its workers are ended, it
    wrote no file): the interpreter's own clean-up of torch and PyG takes seconds more
    (2 to 3 on a busy machine), which Ctrl-C should not wait for. The streams are
    flushed and PyG's generated files removed first. Other commands end as Python does.
    """
    if not _ENDS_AT_ONCE:
        sys.exit(status)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    remove_generated_modules()
    os._exit(status)


def set_up(command: str, num_threads: int) -> None:
    """The process settings of one ``setattn`` command.

    Args:
        command: "train", "pretrain", "predict", "embed", "explain" or "serve"; training
            and pretraining also keep freed memory.
        num_threads: torch CPU threads.
    """
    torch.set_num_threads(num_threads)
    # the sparse engine uses torch's CSR kernels on purpose; their "beta" notice is noise
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    end_on_sigterm()
    hold_signal_handlers()
    if not _CLEANUP:  # once per process, whatever the number of commands it runs
        atexit.register(remove_generated_modules, os.getpid())
        _CLEANUP.append(os.getpid())
    # serve ends as its server decides
    if command in ("train", "pretrain", "predict", "embed", "explain"):
        end_when_stuck()
    if command in ("train", "pretrain"):
        keep_freed_memory()
    if command == "serve":
        _ENDS_AT_ONCE.append(command)
