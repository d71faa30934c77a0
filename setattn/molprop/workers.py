"""Work in forked worker processes: one large molecule with a deadline, and a stream of
chunks in order.

``fork_map(work, items, workers)`` is ``map(work, items)`` computed by forked
processes. ``work`` and what it holds (an ensemble, say) reach the workers by the fork
itself, as the argument of each worker's loop, never through a pipe and never in a
module-level variable; only the items and the results are pickled. At most ``ahead``
items are in flight, so memory stays bounded whatever the stream's length; results come
back in the items' order. An error in ``work`` is raised here; a worker that dies
(killed, out of memory) ends the map with a ``WorkerDiedError`` instead of a wait
forever; an error or an interruption here (SIGTERM, Ctrl-C) stops the workers at once.

``in_worker`` featurises one molecule in a forked child with a deadline. RDKit computes
a descriptor in one C++ call that Python cannot interrupt: on a 5,000-atom chain the
first E-state descriptor alone runs for minutes, and neither the time budget (checked
between two descriptors) nor a SIGTERM or Ctrl-C (whose Python handlers run only once
the call returns) can stop it. So a molecule with more than ``WORKER_ATOMS`` heavy atoms
is featurised in a forked child process: this process waits on a pipe in short steps
(signals are handled between them) and kills the child at the deadline, or when this
process is interrupted. Smaller molecules (the slowest descriptor of a 150-atom chain
takes well under a second) are featurised in-process, where a fork would cost more than
their featurisation.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np
import torch
from rdkit import Chem, rdBase
from torch_geometric.data import Data

from setattn.domains.molecules import InvalidSmilesError, MoleculeSkippedError

__all__ = ["WORKER_ATOMS", "WorkerDiedError", "fork_map", "in_worker", "needs_worker"]

Item = TypeVar("Item")
Result = TypeVar("Result")

WORKER_ATOMS = 150
"""Molecules with more heavy atoms than this are featurised in a worker process."""

_POLL_SECONDS = 0.1  # how often the wait looks at the clock (and lets signals in)
_GRACE_SECONDS = 2.0  # how long a stopped pool's workers get to end before SIGKILL
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def needs_worker(smiles: str) -> bool:
    """Whether ``smiles`` has more than ``WORKER_ATOMS`` heavy atoms (read without
    sanitising, which is fast; a SMILES RDKit cannot read is left to the in-process
    path, which reports why)."""
    if len(smiles) <= WORKER_ATOMS:  # every heavy atom takes at least one character
        return False
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles.strip(), sanitize=False)
    return mol is not None and mol.GetNumHeavyAtoms() > WORKER_ATOMS


def _die_with_parent() -> None:
    """Have the kernel kill this process when its parent ends (Linux's
    ``PR_SET_PDEATHSIG``), so that no featurisation outlives the command; elsewhere the
    parent's ``finally`` alone ends it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _child(send: Any, work: Callable[[], Data]) -> None:
    """The worker's side: ``work()``'s result, or its error as plain values."""
    _die_with_parent()
    try:
        # tensors travel as numpy arrays (plain bytes): torch would share them through
        # file descriptors that end with this process
        fields = {k: v.numpy() if isinstance(v, torch.Tensor) else v
                  for k, v in work().to_dict().items()}
        send.send(("ok", fields))
    except MoleculeSkippedError as err:
        send.send(("skipped", err.smiles, err.reason, err.row, err.source))
    except InvalidSmilesError as err:
        send.send(("invalid", err.smiles, err.reason, err.row, err.source))
    except Exception as err:  # noqa: BLE001 (sent back, raised there as a ValueError)
        send.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        send.close()


def _answer(message: tuple) -> Data:
    kind, *rest = message
    if kind == "ok":
        return Data(**{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                       for k, v in rest[0].items()})
    if kind == "skipped":
        raise MoleculeSkippedError(*rest)
    if kind == "invalid":
        raise InvalidSmilesError(*rest)
    raise ValueError(rest[0])


def in_worker(work: Callable[[], Data], smiles: str, seconds: float, *,
              row: int | None = None, source: str | None = None) -> Data:
    """``work()`` (one molecule's featurisation) run in a forked child process.

    Args:
        work: the featurisation; its ``InvalidSmilesError`` / ``MoleculeSkippedError``
            reach the caller as raised there.
        smiles, row, source: the molecule, for the error at the deadline.
        seconds: the deadline: the child is killed once it has run this long.

    Returns:
        ``work()``'s ``Data``.

    Raises:
        MoleculeSkippedError: past the deadline, or if the child died (out of memory).
        ValueError: for another error in ``work``.
    """
    if multiprocessing.current_process().daemon:  # a daemon may not fork children
        return work()
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, work), daemon=True)
    child.start()
    send.close()  # the child's end; EOF here once the child is gone
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if receive.poll(_POLL_SECONDS):
                try:
                    return _answer(receive.recv())
                except EOFError:  # the child died without an answer
                    raise MoleculeSkippedError(
                        smiles, "its featurisation process died (out of memory?)", row=row,
                        source=source) from None
        raise MoleculeSkippedError(
            smiles, f"featurisation took over {seconds:g} s, the time budget per molecule "
            f"(stopped in its worker process)", row=row, source=source)
    finally:  # at the deadline, on an error, and on SIGTERM or Ctrl-C in this process
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()


class WorkerDiedError(RuntimeError):
    """A worker process of ``fork_map`` ended without an answer (killed, out of memory)."""


def _serve(work: Callable[[Any], Any], init: Callable[[], None] | None, tasks: Any,
           results: Any) -> None:
    """A worker's loop: ``(index, item)`` from ``tasks`` to ``(index, ok, result or
    error)`` on ``results``, until a None task. It ends with ``os._exit`` once its
    results are sent: a forked copy must not flush the parent's buffered output or run
    the parent's exit handlers."""
    _die_with_parent()
    status = 0
    try:
        if init is not None:
            init()
        while True:
            task = tasks.get()
            if task is None:
                break
            index, item = task
            try:
                results.put((index, True, work(item)))
            except Exception as err:  # noqa: BLE001 (raised again in the parent)
                results.put((index, False, err))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent stops us
        status = 1
    finally:
        results.close()
        results.join_thread()  # everything put is in the pipe
        os._exit(status)


def _stop(processes: list) -> None:
    """End worker processes at once: SIGTERM (a worker then ends its own children),
    SIGKILL after ``_GRACE_SECONDS``."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    end = time.monotonic() + _GRACE_SECONDS
    for process in processes:
        process.join(max(end - time.monotonic(), 0.0))
        if process.is_alive():
            process.kill()
            process.join()


def _next_result(results: Any, processes: list) -> tuple[int, bool, Any]:
    """The next ``(index, ok, value)`` a worker put, waiting in short steps (signals are
    handled between them).

    Raises:
        WorkerDiedError: if a worker ended while results were still due.
    """
    while True:
        try:
            return results.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            dead = [p for p in processes if not p.is_alive()]
            if dead:
                raise WorkerDiedError(f"a worker process ended without an answer (exit code "
                                      f"{dead[0].exitcode}; killed, or out of memory?)") from None


def fork_map(work: Callable[[Item], Result], items: Iterable[Item], workers: int,
             init: Callable[[], None] | None = None, ahead: int | None = None
             ) -> Iterator[Result]:
    """``work(item)`` for each item, in order, computed by ``workers`` forked processes
    (in this process for ``workers`` <= 1).

    Args:
        work: the function; it and its closure reach the workers by fork.
        items: the inputs, read only as results are taken (pickled to the workers).
        workers: how many processes.
        init: called first in each worker (e.g. to set its thread count).
        ahead: the most items in flight (default ``2 * workers``).

    Raises:
        WorkerDiedError: if a worker dies; whatever ``work`` raised, as it raised it.
    """
    if workers <= 1:
        yield from map(work, items)
        return
    ctx = multiprocessing.get_context("fork")
    tasks, results = ctx.Queue(), ctx.Queue()
    processes = [ctx.Process(target=_serve, args=(work, init, tasks, results))
                 for _ in range(workers)]
    for process in processes:
        process.start()
    ahead = ahead or 2 * workers
    done: dict[int, Result] = {}
    sent = taken = 0
    source = iter(items)
    exhausted = False
    try:
        while True:
            while not exhausted and sent - taken < ahead:
                try:
                    tasks.put((sent, next(source)))
                    sent += 1
                except StopIteration:
                    exhausted = True
            if taken == sent:
                break
            while taken not in done:
                index, ok, value = _next_result(results, processes)
                if not ok:
                    raise value
                done[index] = value
            yield done.pop(taken)
            taken += 1
        for _ in processes:
            tasks.put(None)
        for process in processes:
            process.join()
    finally:  # an error, SIGTERM or Ctrl-C: stop the workers now, not after every item
        _stop(processes)
        tasks.close()
        results.close()
