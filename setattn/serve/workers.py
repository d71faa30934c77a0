"""The work of ``setattn serve`` in worker processes that a request can stop.

A thread cannot be stopped inside RDKit's C++ (an occlusion of a 289-atom molecule runs
for minutes, and holds Ctrl-C off while it does), so each worker is a process forked
from the server with the models already in its memory. A request takes an idle worker
(``WorkerPool.call``), sends it one task as JSON over a pipe and waits for the answer
without blocking the event loop, watching its time budget and its client. When the
budget is spent, the client goes away or the server stops, the worker is killed
(SIGKILL) and a fresh one is forked in its place: abandoned work never delays the next
request by more than that request's own budget.

- Lanes: each kind of work ("predict", "explain") may hold at most its lane's number of
  workers at once, so that slow explanations always leave a worker to predictions.
- The queue: at most ``max_waiting`` requests wait for a worker; one more is refused at
  once (``PoolBusy``: the server answers 503 with ``Retry-After``).
- A worker ignores SIGINT (Ctrl-C reaches the whole process group; the server decides),
  dies with the server (Linux's parent-death signal), and keeps no pipe or socket of the
  server's (a closed connection is closed, another worker's death is seen).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import multiprocessing
import os
import signal
import stat
import time
from collections.abc import Awaitable, Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["BudgetSpent", "ClientGone", "PoolBusy", "Stopping", "WorkerDied", "WorkerPool"]

POLL_SECONDS = 0.1
"""How often a waiting request looks at its client and its clock."""

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class PoolBusy(Exception):
    """Every worker is busy and the queue of waiting requests is full."""


class BudgetSpent(Exception):
    """The request's time budget ran out: while ``waiting`` for a worker, or working."""

    def __init__(self, waiting: bool) -> None:
        super().__init__("waiting for a worker" if waiting else "working")
        self.waiting = waiting


class ClientGone(Exception):
    """The client closed its connection before the answer was ready."""


class WorkerDied(Exception):
    """A worker process ended without answering (killed from outside, out of memory)."""


class Stopping(Exception):
    """The server is stopping: work still running after its grace time is stopped."""


def _fd_kind(fd: int) -> int:
    try:
        return os.fstat(fd).st_mode
    except OSError:
        return 0


def _open_fds() -> list[int]:
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return [int(name) for name in os.listdir(folder)]
        except OSError:
            continue
    return []


def _close_inherited(keep: set[int]) -> None:
    """Close every pipe and socket but ``keep`` (the server's connections and the other
    workers' pipes came with the fork)."""
    for fd in _open_fds():
        if fd > 2 and fd not in keep:
            mode = _fd_kind(fd)
            if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
                try:
                    os.close(fd)
                except OSError:
                    pass


def _become_worker(keep: set[int]) -> None:
    """A forked worker's process settings: Ctrl-C ignored, SIGTERM ends it, the
    server's signal wakeup and descriptors forgotten, death with the server."""
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the server's close() ends it
        pass
    _close_inherited(keep)


def _answer(handlers: Mapping[str, Callable[..., Any]], task: bytes) -> bytes:
    """One task's answer: ``{"ok": result}``, or the error's kind and message."""
    name, args = json.loads(task)
    try:
        return json.dumps({"ok": handlers[name](*args)}).encode()
    except ValueError as err:
        return json.dumps({"error": "ValueError", "message": str(err)}).encode()
    except Exception as err:  # noqa: BLE001 (answered; the server names it)
        return json.dumps({"error": type(err).__name__, "message": str(err)}).encode()


def _worker_main(tasks: Connection, answers: Connection,
                 handlers: Mapping[str, Callable[..., Any]]) -> None:
    """The worker's loop: a task, its answer, until the server closes the pipe."""
    _become_worker({tasks.fileno(), answers.fileno()})
    while True:
        try:
            task = tasks.recv_bytes()
        except (EOFError, OSError):
            return
        answers.send_bytes(_answer(handlers, task))


class _Worker:
    """One worker process and the server's ends of its two pipes."""

    def __init__(self, handlers: Mapping[str, Callable[..., Any]]) -> None:
        ctx = multiprocessing.get_context("fork")  # the models are in memory already
        task_read, self.tasks = ctx.Pipe(duplex=False)
        self.answers, answer_write = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_worker_main, args=(task_read, answer_write,
                                                              handlers),
                                   name="setattn-serve-worker", daemon=True)
        self.process.start()
        task_read.close()
        answer_write.close()

    async def ask(self, name: str, args: list) -> Any:
        """Send one task and wait for its answer (cancel the wait to give up on it).

        Raises:
            ValueError: the task's own ValueError (an unknown target, ...).
            WorkerDied: if the process ended without answering.
            RuntimeError: any other error of the task, by its kind and message.
        """
        loop = asyncio.get_running_loop()
        try:
            self.tasks.send_bytes(json.dumps([name, args]).encode())
        except OSError:
            raise WorkerDied() from None
        ready = loop.create_future()
        fd = self.answers.fileno()
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        try:
            reply = json.loads(self.answers.recv_bytes())
        except (EOFError, OSError):
            raise WorkerDied() from None
        if "ok" in reply:
            return reply["ok"]
        if reply["error"] == "ValueError":
            raise ValueError(reply["message"])
        raise RuntimeError(f"{reply['error']}: {reply['message']}")

    def kill(self) -> None:
        """End the process now (SIGKILL) and close the pipes."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.tasks.close()
        self.answers.close()


class WorkerPool:
    """Forked worker processes, each running one task at a time.

    Args:
        handlers: the tasks by name, each a function of JSON values returning JSON
            values (run in the worker).
        size: the workers.
        lanes: the most workers each kind of task may hold at once (a kind not named:
            ``size``).
        max_waiting: requests that may wait for a worker; one more is ``PoolBusy``.
    """

    def __init__(self, handlers: Mapping[str, Callable[..., Any]], size: int,
                 lanes: Mapping[str, int] | None = None, max_waiting: int = 32) -> None:
        self._handlers = dict(handlers)
        self._lanes = {name: max(1, min(size, n)) for name, n in (lanes or {}).items()}
        self.size = size
        self.max_waiting = max_waiting
        self._busy: dict[str, int] = {}
        self._waiters: list[list] = []  # [lane, future] of each waiting request
        self._closed = False
        self._stop_at: float | None = None  # time.monotonic() when running work stops
        self._idle = [_Worker(self._handlers) for _ in range(size)]
        self._working: set[_Worker] = set()

    @property
    def waiting(self) -> int:
        """Requests now waiting for a worker."""
        return len(self._waiters)

    def _can_take(self, lane: str) -> bool:
        return bool(self._idle) and self._busy.get(lane, 0) < self._lanes.get(lane, self.size)

    def _wake(self) -> None:
        """Wake the first waiting request that may take the idle worker."""
        for lane, future in self._waiters:
            if not future.done() and self._can_take(lane):
                future.set_result(None)
                return

    def stop_after(self, seconds: float) -> None:
        """Stop the work running ``seconds`` from now, and refuse waiting and new
        requests (``Stopping``): the server is shutting down. Safe in a signal handler."""
        self._stop_at = time.monotonic() + seconds

    def _check_running(self, worker: _Worker | None = None) -> None:
        if self._stop_at is not None and (worker is None or time.monotonic() >= self._stop_at):
            raise Stopping()
        if worker is not None and (self._closed or not worker.process.is_alive()):
            raise WorkerDied()  # killed by close(), or from outside

    async def _take(self, lane: str, deadline: float) -> _Worker:
        loop = asyncio.get_running_loop()
        if not self._can_take(lane):
            if len(self._waiters) >= self.max_waiting:
                raise PoolBusy()
            entry = [lane, loop.create_future()]  # its place in the queue is kept
            self._waiters.append(entry)
            taking = False
            try:
                while not self._can_take(lane):
                    if entry[1].done():  # woken, but another request took the worker
                        entry[1] = loop.create_future()
                    left = deadline - loop.time()
                    if left <= 0:
                        raise BudgetSpent(waiting=True)
                    await asyncio.wait({entry[1]}, timeout=min(POLL_SECONDS, left))
                    self._check_running()
                taking = True
            finally:
                self._waiters.remove(entry)
                if not taking and entry[1].done():
                    self._wake()  # woken, but giving up: the next one may take it
        worker = self._idle.pop()
        self._working.add(worker)
        self._busy[lane] = self._busy.get(lane, 0) + 1
        return worker

    def _give_back(self, lane: str, worker: _Worker, healthy: bool) -> None:
        """Return the worker, or kill it and fork a fresh one in its place."""
        self._busy[lane] -= 1
        self._working.discard(worker)
        if not healthy:
            worker.kill()
            if self._closed:
                return
            worker = _Worker(self._handlers)
        if self._closed:
            worker.kill()
            return
        self._idle.append(worker)
        self._wake()

    async def call(self, lane: str, name: str, args: list, budget: float,
                   gone: Callable[[], Awaitable[bool]] | None = None) -> Any:
        """Run the task ``name(*args)`` on a worker of ``lane`` within ``budget`` seconds
        (the wait for a worker included).

        Args:
            gone: tells whether the client has left (looked at every ``POLL_SECONDS``).

        Raises:
            PoolBusy: the queue is full.
            BudgetSpent: the budget ran out, waiting or working (the work is killed).
            ClientGone: the client left (the work is killed).
            WorkerDied, ValueError, RuntimeError: as ``_Worker.ask``.
        """
        if self._closed:
            raise PoolBusy()
        self._check_running()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        worker = await self._take(lane, deadline)
        healthy = False
        answer = asyncio.ensure_future(worker.ask(name, args))
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise BudgetSpent(waiting=False)
                done, _ = await asyncio.wait({answer}, timeout=min(POLL_SECONDS, left))
                if done:
                    result = answer.result()  # a task's ValueError leaves a healthy worker
                    healthy = True
                    return result
                self._check_running(worker)
                if gone is not None and await gone():
                    raise ClientGone()
        except (ValueError, RuntimeError):
            healthy = True
            raise
        finally:
            if not answer.done():
                answer.cancel()
            self._give_back(lane, worker, healthy)

    def close(self) -> None:
        """Kill every worker, busy or idle; calls after this are ``PoolBusy``."""
        self._closed = True
        for worker in [*self._idle, *self._working]:
            worker.kill()
        self._idle.clear()
