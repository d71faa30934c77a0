"""``setattn.serve.workers.WorkerPool``: work in forked processes that a request stops
when its budget is spent or its client leaves, a bounded queue, lanes that keep a
worker free for other work, and a worker's death seen, not waited on forever."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from setattn.serve.workers import BudgetSpent, ClientGone, PoolBusy, WorkerDied, WorkerPool


def _sleep(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def _refuse(text: str) -> None:
    raise ValueError(f"no: {text}")


def _crash() -> None:
    raise KeyError("broken")


HANDLERS = {"sleep": _sleep, "refuse": _refuse, "crash": _crash, "pid": os.getpid}


def _pool(size: int = 2, **kwargs) -> WorkerPool:
    return WorkerPool(HANDLERS, size, **kwargs)


def test_answers_come_from_worker_processes_and_errors_keep_their_kind():
    pool = _pool()

    async def main():
        pids = await asyncio.gather(*(pool.call("a", "pid", [], 10) for _ in range(4)))
        with pytest.raises(ValueError, match="no: x"):
            await pool.call("a", "refuse", ["x"], 10)
        with pytest.raises(RuntimeError, match="KeyError: 'broken'"):
            await pool.call("a", "crash", [], 10)
        return pids, await pool.call("a", "pid", [], 10)

    try:
        pids, after = asyncio.run(main())
    finally:
        pool.close()
    assert os.getpid() not in pids and len(set(pids)) <= 2
    assert after in pids  # errors of the task leave its worker in service


def test_spent_budget_kills_the_work_and_frees_the_worker_at_once():
    pool = _pool(size=1)

    async def main():
        first = await pool.call("a", "pid", [], 10)
        started = time.perf_counter()
        with pytest.raises(BudgetSpent) as caught:
            await pool.call("a", "sleep", [60], 0.5)
        spent = time.perf_counter() - started
        started = time.perf_counter()
        second = await pool.call("a", "pid", [], 10)
        return first, second, spent, time.perf_counter() - started, caught.value.waiting

    try:
        first, second, spent, next_wait, waiting = asyncio.run(main())
    finally:
        pool.close()
    # the sleep would take 60 s: 10 s leaves a loaded machine room and still tells
    assert spent < 10 and not waiting  # stopped while working
    assert next_wait < 10  # the next request did not wait for the abandoned sleep
    assert second != first  # a fresh worker replaced the killed one
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)


def test_a_client_that_leaves_has_its_work_stopped():
    pool = _pool(size=1)
    left_at = time.monotonic() + 0.4

    async def gone() -> bool:
        return time.monotonic() > left_at

    async def main():
        started = time.perf_counter()
        with pytest.raises(ClientGone):
            await pool.call("a", "sleep", [60], 30, gone)
        return time.perf_counter() - started, await pool.call("a", "pid", [], 5)

    try:
        took, _ = asyncio.run(main())
    finally:
        pool.close()
    assert took < 10  # not the sleep's 60 s


def test_a_full_queue_refuses_and_a_wait_past_the_budget_is_said():
    pool = _pool(size=1, max_waiting=1)

    async def main():
        slow = asyncio.ensure_future(pool.call("a", "sleep", [2], 10))
        await asyncio.sleep(0.2)
        waiting = asyncio.ensure_future(pool.call("a", "pid", [], 0.5))
        await asyncio.sleep(0.1)
        assert pool.waiting == 1
        with pytest.raises(PoolBusy):
            await pool.call("a", "pid", [], 10)
        with pytest.raises(BudgetSpent) as caught:
            await waiting
        await slow
        return caught.value.waiting

    try:
        assert asyncio.run(main()) is True  # spent waiting for a worker, not working
    finally:
        pool.close()


def test_a_lane_leaves_workers_to_the_others():
    pool = _pool(size=2, lanes={"explain": 1})

    async def main():
        slow = [asyncio.ensure_future(pool.call("explain", "sleep", [3], 10))
                for _ in range(2)]
        await asyncio.sleep(0.2)
        await pool.call("predict", "pid", [], 10)
        answered_during = not any(task.done() for task in slow)
        started = time.perf_counter()
        await asyncio.gather(*slow)
        return answered_during, time.perf_counter() - started

    try:
        answered_during, slow = asyncio.run(main())
    finally:
        pool.close()
    assert answered_during  # one worker stayed free of explanations
    assert slow > 4  # one after the other (about 5.8 s); side by side would be 2.8 s


def test_a_killed_worker_is_reported_and_replaced():
    pool = _pool(size=1)

    async def main():
        pid = await pool.call("a", "pid", [], 5)
        task = asyncio.ensure_future(pool.call("a", "sleep", [30], 10))
        await asyncio.sleep(0.3)
        os.kill(pid, signal.SIGKILL)  # out of memory, or a user's kill
        with pytest.raises(WorkerDied):
            await task
        return await pool.call("a", "pid", [], 5)

    try:
        assert asyncio.run(main()) > 0
    finally:
        pool.close()


def test_close_ends_busy_workers():
    pool = _pool(size=1)

    async def main():
        pid = await pool.call("a", "pid", [], 5)
        task = asyncio.ensure_future(pool.call("a", "sleep", [30], 60))
        await asyncio.sleep(0.3)
        pool.close()
        with pytest.raises(WorkerDied):
            await task
        return pid

    pid = asyncio.run(main())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
