"""What every benchmark shares: its record, and the timing and memory measurements.

A record is one JSON file, ``benchmarks/results/<benchmark>.json``, the current result of
one benchmark script::

    {"benchmark": "engine", "title": "...", "command": ".venv/bin/python benchmarks/...",
     "commit": "<git HEAD when run>", "dirty": false, "date": "2026-11-28T17:05:00Z",
     "machine": {"cpu": "...", "cores": 2, "python": "3.11.7", "torch": "2.13.0",
                 "torch_geometric": "2.8.1", "load": 1.2},
     "threads": 1, "summary": "one or two sentences",
     "tables": [{"title": "...", "columns": [...], "rows": [[...]], "notes": "..."}],
     "raw": {...}}

``dirty`` says whether ``setattn/`` had uncommitted changes; ``library`` holds the git
hashes at ``commit`` of the library paths the benchmark exercises (``EXERCISED``), and
:func:`currency` tells whether they are still those of HEAD ("current") or not
("earlier"); table cells are display strings; ``machine.load`` is the 1-minute load
average when the record was made. ``markdown(record)`` prints the tables.

Finished runs are kept as data (:func:`store_run`), a JSON file per run named by the key
of its material (:func:`run_key`): ``benchmarks/runs/anchors/<key>.json`` for an anchor
(its test predictions: it does not change when setattn does, so it is trained once) and
``benchmarks/runs/<benchmark>/<key>.json`` for a benchmark's other runs. Floats are
written as their ``repr``, which reads back to the same float.

Time: medians of several passes in one process, in interleaved rounds where sides are
compared (:func:`interleaved_seconds`). Memory: the peak RSS growth of a pass, reset
through ``/proc/self/clear_refs`` just before it (:func:`peak_mb_here`), in a fresh
subprocess (:func:`subprocess_json`) run with glibc's mmap threshold fixed at 64 kB
(``MALLOC_MMAP_THRESHOLD_``): by default glibc raises the threshold after the warm-up
pass frees its large buffers and reuses them, and the measured pass then shows almost no
growth.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
KEYS = ("benchmark", "title", "command", "commit", "dirty", "date", "machine", "threads",
        "summary", "tables")
MACHINE_KEYS = ("cpu", "cores", "python", "torch", "torch_geometric", "load")


# --------------------------------------------------------------------------------------
# records


def table(title: str, columns: list[str], rows: list[list[object]],
          notes: str | None = None) -> dict:
    """One table of a record; every cell becomes a display string."""
    out = {"title": title, "columns": list(columns),
           "rows": [[str(c) for c in row] for row in rows]}
    if notes:
        out["notes"] = notes
    return out


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(load: float | None = None) -> dict:
    """The machine a record was made on; ``load`` defaults to the 1-minute load now."""
    try:
        import torch_geometric

        pyg = torch_geometric.__version__
    except ImportError:
        pyg = None
    return {"cpu": _cpu_name(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "torch_geometric": pyg,
            "load": round(os.getloadavg()[0] if load is None else load, 2)}


def git_state(root: Path = ROOT) -> tuple[str, bool]:
    """(HEAD commit, whether ``setattn/`` has uncommitted changes); ("unknown", True)
    outside a git checkout."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True,
                                capture_output=True, text=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--", "setattn"], cwd=root,
                                check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True
    return commit, bool(status.strip())


def command_line(argv: list[str] | None = None) -> str:
    """The command that ran this script, as typed from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    return " ".join([".venv/bin/python", str(script), *map(shlex.quote, argv[1:])])


MOLECULE_CODE = (("setattn", ("cli", "serve")),)
ENGINE_CODE = (("setattn/engine", ()), ("setattn/topology.py", ()), ("setattn/scores.py", ()),
               ("setattn/attention_graph.py", ()), ("setattn/capture.py", ()))
# the examples train set, graph, image and text models: everything but the molecule
# product (its model, command line and server)
EXAMPLE_CODE = (("setattn", ("molprop", "cli", "serve")),)
EXERCISED: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "engine": ENGINE_CODE,
    "scaling": ENGINE_CODE,  # setattn.attend on three topologies
    "layers": (*ENGINE_CODE, ("setattn/nn", ())),
    "examples": EXAMPLE_CODE,
    **{name: MOLECULE_CODE for name in ("molecules", "moleculeace", "blend_stack",
                                        "attribution")}}
"""The library paths each benchmark exercises (path, entries of it left out); the others:
all of ``setattn/``."""


def library_trees(benchmark: str, rev: str = "HEAD", root: Path = ROOT) -> dict | None:
    """The git tree (or blob) hashes at ``rev`` of the paths ``benchmark`` exercises, and
    their combined sha256: ``{"paths": {path: hash}, "tree": digest}``; None outside git
    or where ``rev`` is unknown."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                              text=True).stdout
    paths: dict[str, str] = {}
    try:
        for path, skip in EXERCISED.get(benchmark, (("setattn", ()),)):
            if not skip:
                paths[path] = git("rev-parse", f"{rev}:{path}").strip()
                continue
            for line in git("ls-tree", rev, f"{path}/").splitlines():  # "mode type hash\tpath"
                meta, name = line.split("\t", 1)
                if name.rsplit("/", 1)[-1] not in skip:
                    paths[name] = meta.split()[2]
    except (OSError, subprocess.CalledProcessError):
        return None
    text = "".join(f"{p} {h}\n" for p, h in sorted(paths.items()))
    return {"paths": paths, "tree": hashlib.sha256(text.encode()).hexdigest()}


def currency(record: dict, root: Path = ROOT) -> str:
    """"current" when the library code the record's benchmark exercises is the same at
    HEAD as when it ran (its ``library``, else the trees at its ``commit``), "earlier"
    when it changed since, "unknown" where git cannot tell or the run had uncommitted
    changes to ``setattn/``."""
    then = record.get("library") or library_trees(record["benchmark"], record["commit"], root)
    now = library_trees(record["benchmark"], "HEAD", root)
    if then is None or now is None or record.get("dirty"):
        return "unknown"
    return "current" if then["tree"] == now["tree"] else "earlier"


def make_record(benchmark: str, title: str, summary: str, tables: list[dict],
                threads: int, raw: dict | None = None, command: str | None = None,
                load: float | None = None) -> dict:
    """A record of a run made now, at the checkout's HEAD."""
    commit, dirty = git_state()
    now = datetime.datetime.now(datetime.timezone.utc)
    record = {"benchmark": benchmark, "title": title,
              "command": command or command_line(), "commit": commit, "dirty": dirty,
              "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "machine": machine(load),
              "threads": threads, "summary": summary, "tables": tables}
    record["library"] = library_trees(benchmark)
    if raw is not None:
        record["raw"] = raw
    return record


def problems(record: dict) -> list[str]:
    """What a record lacks or gets wrong (empty when it is well formed)."""
    found = [f"no key {k!r}" for k in KEYS if k not in record]
    found += [f"machine has no {k!r}" for k in MACHINE_KEYS
              if k not in record.get("machine", {})]
    for t in record.get("tables", []):
        width = len(t.get("columns", []))
        if not t.get("title") or not width:
            found.append(f"table {t.get('title')!r} has no title or no columns")
        found += [f"table {t['title']!r}: a row of {len(r)} cells, not {width}"
                  for r in t.get("rows", []) if len(r) != width]
        found += [f"table {t['title']!r}: a cell that is not a string"
                  for r in t.get("rows", []) if not all(isinstance(c, str) for c in r)]
    return found


def write_record(record: dict, path: Path | None = None) -> Path:
    """Write ``record`` (default ``results/<benchmark>.json``) and return the path.

    Raises:
        ValueError: naming what the record lacks.
    """
    bad = problems(record)
    if bad:
        raise ValueError(f"record {record.get('benchmark')!r}: " + "; ".join(bad))
    path = Path(path) if path is not None else RESULTS / f"{record['benchmark']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def read_record(path: Path) -> dict:
    """A record written by :func:`write_record`."""
    return json.loads(Path(path).read_text())


def markdown_table(t: dict) -> str:
    """One table as Markdown, its title above and its notes below."""
    lines = [f"**{t['title']}**", "", "| " + " | ".join(t["columns"]) + " |",
             "|" + "---|" * len(t["columns"])]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in t["rows"]]
    if t.get("notes"):
        lines += ["", t["notes"]]
    return "\n".join(lines)


def markdown(record: dict) -> str:
    """The record as Markdown: title, summary, every table, and where it was made."""
    m = record["machine"]
    head = [f"## {record['title']}", "", record["summary"], "", f"`{record['command']}`"]
    tail = [f"commit {record['commit'][:10]}{' (setattn/ modified)' if record['dirty'] else ''}"
            f", {record['date']}, {m['cpu']}, {m['cores']} cores, load {m['load']}, "
            f"{record['threads']} thread(s), torch {m['torch']}"]
    return "\n\n".join(["\n".join(head), *map(markdown_table, record["tables"]), *tail])


def finish(record: dict, out: Path | None) -> Path:
    """Print the record's Markdown, write it, and say where."""
    print(markdown(record))
    path = write_record(record, out)
    print(f"\nrecord: {path}", file=sys.stderr)
    return path


# --------------------------------------------------------------------------------------
# statistics of runs over seeds


def mean_std(runs: list[dict], key: str = "metric") -> str:
    """``mean +- sample std`` of ``run["result"][key]`` over the runs (one run: its value;
    "-" if any lacks it)."""
    values = [r["result"][key] for r in runs if r["result"].get(key) is not None]
    if not runs or len(values) != len(runs):
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} +- {statistics.stdev(values):.3f}"


def better(a: float, b: float, metric: str) -> bool:
    return a < b if metric == "rmse" else a > b


def paired(ours: list[dict], theirs: list[dict], metric: str) -> list[str]:
    """One tool's runs (``{"seed", "result": {"metric"}}``) against another's on the seeds
    both ran: the mean per-seed difference (positive: ours better), the seeds ours won,
    and the two-sided Wilcoxon signed-rank p (exact; 5 seeds cannot go below 0.0625)."""
    from scipy.stats import wilcoxon

    a = {r["seed"]: r["result"]["metric"] for r in ours}
    b = {r["seed"]: r["result"]["metric"] for r in theirs}
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return ["-", "-", "-"]
    sign = -1.0 if metric == "rmse" else 1.0
    diffs = [sign * (a[s] - b[s]) for s in seeds]  # > 0: ours better
    won = sum(d > 0 for d in diffs)
    p = wilcoxon(diffs).pvalue if len(seeds) > 1 and any(diffs) else float("nan")
    return [f"{statistics.mean(diffs):+.3f}", f"{won}/{len(seeds)}", f"{p:.3f}"]


def ratio_cells(ratios: list[float]) -> list[str]:
    """The median of per-round ratios, and their range."""
    return [f"{statistics.median(ratios):.2f}x", f"{min(ratios):.2f}x to {max(ratios):.2f}x"]


# --------------------------------------------------------------------------------------
# finished runs kept as data

STORE = ROOT / "benchmarks" / "runs"
KEY_DIGITS = 16


def file_digest(paths: Path | Sequence[Path]) -> str:
    """sha256 of the bytes of a file, or of several files in the given order (each
    preceded by its length, so that no two different sequences hash alike)."""
    digest = hashlib.sha256()
    for path in [paths] if isinstance(paths, Path) else paths:
        data = Path(path).read_bytes()
        digest.update(f"{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


def rows_digest(smiles: Sequence[str], labels: Sequence[str]) -> str:
    """sha256 of a split's rows: each row's SMILES and part label, in file order."""
    if len(smiles) != len(labels):
        raise ValueError(f"{len(smiles)} SMILES but {len(labels)} split labels")
    return hashlib.sha256(json.dumps(list(zip(smiles, labels))).encode()).hexdigest()


def tree_digest(root: Path, skip: Iterable[str] = ()) -> str:
    """sha256 of the files under ``root`` (paths and bytes, sorted by path), leaving out
    the top-level entries named in ``skip`` and Python's byte-code caches."""
    skip = set(skip)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if rel.parts[0] in skip or "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        data = path.read_bytes()
        digest.update(f"{rel.as_posix()}\0{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


def run_key(material: dict) -> str:
    """The key of a run: the first ``KEY_DIGITS`` hex digits of the sha256 of its material
    as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_DIGITS]


def load_stored(kind: str, key: str, store: Path = STORE) -> dict | None:
    """The stored run ``key`` of ``kind`` ("anchors" or a benchmark's name), or None.

    Raises:
        ValueError: if the file holds another key (a renamed or damaged file).
    """
    path = store / kind / f"{key}.json"
    if not path.is_file():
        return None
    run = json.loads(path.read_text())
    if run.get("key") != key or run_key(run.get("material", {})) != key:
        raise ValueError(f"{path}: its key or material is not {key}")
    return run


def store_run(kind: str, material: dict, content: dict, store: Path = STORE) -> Path:
    """Write a finished run: ``{"key", "material", **content}`` at its key's path,
    atomically; returns the path."""
    key = run_key(material)
    path = store / kind / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": key, "material": material, **content}, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def missing_error(missing: list[tuple[str, str]]) -> str:
    """The message of a table that lacks stored runs: each missing key and what it is."""
    lines = [f"  {key}  {what}" for key, what in missing]
    return (f"{len(missing)} stored run(s) missing, train them first (the same command "
            "without --tables-only):\n" + "\n".join(lines))


# --------------------------------------------------------------------------------------
# timing and memory


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


def interleaved_seconds(cases: dict[str, Callable[[], object]], repeats: int,
                        sync: Callable[[], object] | None = None) -> dict[str, float]:
    """Median seconds of each case over ``repeats`` rounds of one run per case (after a
    warm-up round), so that a shared machine's drifting load hits all cases alike;
    ``sync`` (a GPU's ``torch.cuda.synchronize``) ends each timed run."""
    done = sync or (lambda: None)
    for fn in cases.values():
        fn()
    done()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            done()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def load_average() -> str:
    """The 1, 5 and 15 minute load averages."""
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
    """Wait for ``proc``, polling the memory of it and its descendants: MB of the
    parent's and the largest worker's peak RSS (VmHWM), their sum (an upper bound:
    forked workers share pages) and the peak total PSS seen in one poll."""
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
            "rss_sum": sum(hwm.values()) / 1024, "pss_peak": pss_peak / 1024}


def subprocess_json(script: str, case: str, extra: list[str] | None = None) -> dict:
    """Run ``python script --memory case`` (glibc's mmap threshold fixed, module
    docstring) and return the JSON object its last line prints."""
    cmd = [sys.executable, script, "--memory", case, *(extra or [])]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")  # buffers >= 64 kB: own mappings
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def timed(cmd: list[str], log: Path, threads: int, **env_extra: str) -> float:
    """Wall seconds of ``cmd`` run with ``threads`` CPU threads, its output in ``log``.

    Raises:
        RuntimeError: naming the log if the command fails.
    """
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               **env_extra)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "w") as handle:
        res = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
    seconds = time.perf_counter() - start
    if res.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed (exit {res.returncode}); see {log}")
    return seconds



def install_venv(venv: Path, packages: Sequence[str], what: str) -> Path:
    """Create the virtual environment ``venv`` and pip-install ``packages`` into it,
    saying so (an anchor tool kept apart from setattn's own environment); its Python."""
    print(f"installing {what} into {venv} ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *packages], check=True)
    return python
