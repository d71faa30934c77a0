"""Shared timing and memory helpers for the benchmark scripts.

Time: median wall time of several forward+backward runs after warm-up, in one process.
Memory: each case is re-run in a fresh subprocess (``python SCRIPT --memory CASE``),
which reports the growth of its peak resident set size (VmHWM, reset through
``/proc/self/clear_refs`` just before the pass, so that neither setup nor the parent
process image counts) over its resident size just before the measured forward+backward.
That counts everything the run allocates (activations, gradients, temporaries), the CPU analogue of
``torch.cuda.max_memory_allocated`` deltas. The subprocess runs with glibc's mmap threshold
fixed at 64 kB (``MALLOC_MMAP_THRESHOLD_``): by default glibc raises the threshold after the
warm-up pass frees its large buffers, keeps later ones in its heap and reuses them, and the
measured pass then shows almost no growth.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable


def time_it(fn: Callable[[], object], repeats: int = 5, warmup: int = 2) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_seconds(cases: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each case over ``repeats`` rounds of one run per case (after a
    warm-up round), so that a shared machine's drifting load hits all cases alike."""
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as printed by every benchmark."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def peak_mb_here(fn: Callable[[], object]) -> float:
    """Peak RSS growth (MB) of one ``fn()`` call in this process."""
    before = _status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current RSS
    fn()
    return max(_status_mb("VmHWM") - before, 0.0)


def subprocess_json(script: str, case: str, extra: list[str] | None = None) -> dict:
    """Run ``python script --memory case`` (glibc's mmap threshold fixed, module
    docstring) and return the JSON object its last line prints."""
    cmd = [sys.executable, script, "--memory", case, *(extra or [])]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")  # buffers >= 64 kB: own mappings
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def peak_mb_subprocess(script: str, case: str, extra: list[str] | None = None) -> float:
    """Run ``python script --memory case`` and read the MB figure it prints as JSON."""
    return float(subprocess_json(script, case, extra)["peak_mb"])


def print_table(header: list[str], rows: list[list[object]], markdown: bool = False) -> None:
    """Print a plain aligned text table, or a Markdown one."""
    cells = [header] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    if markdown:
        for n, r in enumerate(cells):
            print("| " + " | ".join(r) + " |")
            if n == 0:
                print("|" + "---|" * len(header))
        return
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for n, r in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _proc_kb(pid: int, path: str, field: str) -> int:
    """A ``field:  N kB`` line of /proc/PID/PATH in kB (0 if the process is gone)."""
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def _descendants(root: int) -> list[int]:
    """PIDs of ``root``'s living descendants, from the parent PIDs in /proc/*/stat."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # the command name may hold spaces: the fields after ")" are safe
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid]
        found += children
        frontier += children
    return found


def watch_tree(proc: subprocess.Popen, interval: float = 0.25) -> dict:
    """Wait for ``proc``, polling the memory of it and its descendants.

    Returns:
        MB figures: ``parent_peak`` (VmHWM, the kernel's exact peak RSS of ``proc``),
        ``child_peak`` (the largest VmHWM of a descendant), ``rss_sum`` (the sum of all
        those peaks: an upper bound, as forked workers share their parent's pages and
        RSS counts shared pages in every process), and ``pss_peak`` (the largest total
        proportional set size seen in one poll: shared pages divided among their
        sharers, the tree's actual footprint), plus ``children`` seen.
    """
    hwm: dict[int, int] = {}
    pss_peak = 0
    while proc.poll() is None:
        pids = [proc.pid, *_descendants(proc.pid)]
        for pid in pids:
            hwm[pid] = max(hwm.get(pid, 0), _proc_kb(pid, "status", "VmHWM"))
        pss_peak = max(pss_peak, sum(_proc_kb(pid, "smaps_rollup", "Pss") for pid in pids))
        time.sleep(interval)
    children = [v for pid, v in hwm.items() if pid != proc.pid]
    return {"parent_peak": hwm.get(proc.pid, 0) / 1024,
            "child_peak": max(children, default=0) / 1024,
            "rss_sum": sum(hwm.values()) / 1024, "pss_peak": pss_peak / 1024,
            "children": len(children)}
