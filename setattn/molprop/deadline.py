"""Featurising a large molecule in a worker process with a deadline.

RDKit computes a descriptor in one C++ call that Python cannot interrupt: on a
5,000-atom chain the first E-state descriptor alone runs for minutes, and neither the
time budget (checked between two descriptors) nor a SIGTERM or Ctrl-C (whose Python
handlers run only once the call returns) can stop it. So a molecule with more than
``WORKER_ATOMS`` heavy atoms is featurised in a forked child process: this process
waits on a pipe in short steps (signals are handled between them) and kills the child
at the deadline, or when this process is interrupted. Smaller molecules (the slowest
descriptor of a 150-atom chain takes well under a second) are featurised in-process,
where a fork would cost more than their featurisation.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import numpy as np
import torch
from rdkit import Chem, rdBase
from torch_geometric.data import Data

from setattn.domains.molecules import InvalidSmilesError, MoleculeSkippedError

__all__ = ["WORKER_ATOMS", "in_worker", "needs_worker", "stop_pool"]

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


def stop_pool(pool: Executor) -> None:
    """End a process pool at once, on an error or an interruption (SIGTERM, Ctrl-C):
    queued tasks are cancelled and the worker processes killed, where
    ``shutdown(wait=True)`` would first run every task already submitted."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:  # SIGTERM first: a worker then ends its own children
        if process.is_alive():
            process.terminate()
    end = time.monotonic() + _GRACE_SECONDS
    for process in processes:
        process.join(max(end - time.monotonic(), 0.0))
        if process.is_alive():
            process.kill()
            process.join()
