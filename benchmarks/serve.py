"""``setattn serve`` under load: concurrent clients on the loopback, against ``setattn
predict`` on the same molecules; then the same with slow explanations among them, with
compressed bodies at the size limit, and Ctrl-C.

Run:  .venv/bin/python benchmarks/serve.py [--model runs/freesolv] [--clients 16]
          [--slow-clients 4] [--slow-atoms 289] [--budget 30] [--seconds 60]
          [--batch 20] [--workers 2] [--out RECORD]
      (``make demo`` makes runs/freesolv; writes results/serve.json)

Phases, each ``--seconds`` long on one server:

  idle       ``--clients`` less ``--slow-clients`` fast clients alone (below)
  mixed      the same fast clients while ``--slow-clients`` more each send ``POST
             /explain`` of one ``--slow-atoms``-atom chain (integrated gradients: tens of
             seconds, beyond the ``--budget`` of a request, so they are stopped: 422);
             the fast requests' p99 should stay within 2x the idle p99 plus the budget
  gzip       4 clients sending ``Content-Encoding: gzip`` bodies just under
             ``--max-body-bytes`` (of the server's default, 2 MB) that expand past it:
             each must be 413; the server's peak memory (its own and its workers') is
             read from /proc throughout
  ctrl-c     SIGINT while slow explanations run: the seconds until the server ended

The molecules: FreeSolv and ESOL (the bundled SMILES) with one invalid SMILES in every
20 (syntax errors, an unknown element, an empty one). ``setattn serve`` runs as a
subprocess on 127.0.0.1; ``--clients`` threads, each with its own keep-alive
connection, send ``POST /predict`` requests of ``--batch`` molecules drawn at random
(seeded) for ``--seconds``. Every answer is checked:

  lost        a request that got no 200 answer (refused, failed, timed out)
  misaligned  a row whose SMILES is not the one sent at its place, a row missing or
              extra, an error where ``setattn predict`` predicted (or the reverse), or
              a prediction that is not ``setattn predict``'s for that molecule (within
              1e-3: a batch's make-up moves the last float32 digits)

The anchor: ``python -m setattn.cli predict`` on a CSV of the same molecules, one
process, timed from start to exit (loading the run included, as a user runs it). Its
output is the reference the answers are checked against. Latency percentiles are of
whole requests as a client sees them; molecules/s counts every molecule answered.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import http.client
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from setattn.datasets import DATASETS_DIR

from helpers.record import finish, load_average, make_record, table, watch_tree

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [("freesolv.csv", "smiles"), ("delaney-processed.csv", "smiles")]
INVALID = ["not_a_smiles", "C1CC", "", "[Xx]CC", "c1ccccc", "C(C"]
TOLERANCE = 1e-3


def molecule_pool() -> list[str]:
    """The bundled SMILES with one invalid SMILES after every 19 valid ones."""
    smiles = []
    for name, column in SOURCES:
        with open(DATASETS_DIR / "molecules" / name, newline="") as handle:
            smiles += [row[column] for row in csv.DictReader(handle)]
    pool = []
    for i, s in enumerate(smiles):
        pool.append(s)
        if i % 19 == 18:
            pool.append(INVALID[(i // 19) % len(INVALID)])
    return pool


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def cli_predict(model: str, pool: list[str], folder: Path) -> tuple[float, dict[str, list]]:
    """(wall seconds of ``setattn predict`` on the pool, SMILES -> [cells] of its output)."""
    data, out = folder / "pool.csv", folder / "preds.csv"
    with data.open("w", newline="") as handle:
        csv.writer(handle).writerows([["smiles"], *([s] for s in pool)])
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "setattn.cli", "predict", "--model", model, "--data",
                    str(data), "--output", str(out)], check=True, env=env(),
                   stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    with out.open(newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    assert [r[0] for r in rows] == pool, "setattn predict lost or reordered rows"
    return seconds, {r[0]: r[1:] for r in rows}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model: str, port: int, workers: int, budget: float) -> subprocess.Popen:
    """``setattn serve`` on the loopback, once it answers ``GET /model``."""
    proc = subprocess.Popen([sys.executable, "-m", "setattn.cli", "serve", "--model", model,
                             "--port", str(port), "--workers", str(workers),
                             "--budget-seconds", str(budget)], env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/model")
            if connection.getresponse().status == 200:
                return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("setattn serve did not start") from None
            time.sleep(0.2)


def _same_cell(value: float | str | None, cell: str) -> bool:
    """Whether an answered number is ``setattn predict``'s cell ("" : None; "inf" / "-inf"
    as text; a number within the tolerance)."""
    if cell == "" or value is None:
        return cell == "" and value is None
    expected = float(cell)
    if math.isinf(expected) or isinstance(value, str):
        return str(value) == cell
    return abs(value - expected) <= TOLERANCE * max(1.0, abs(expected))


def _same(row: dict, columns: list[str], expected: list[str]) -> bool:
    """Whether one answered row is ``setattn predict``'s row for its SMILES."""
    message, wanted = row[columns[-1]], expected[-1]
    if (message == "") != (wanted == "") or message.startswith("note: ") != \
            wanted.startswith("note: "):
        return False
    return all(_same_cell(row[c], cell) for c, cell in zip(columns[1:-1], expected[:-1]))


def misaligned_rows(sent: list[str], answer: dict, reference: dict[str, list]) -> int:
    """Rows of an answer that are not ``setattn predict``'s for the SMILES sent there."""
    rows, columns = answer["rows"], answer["columns"]
    bad = abs(len(rows) - len(sent))
    for smiles, row in zip(sent, rows):
        if row[columns[0]] != smiles or not _same(row, columns, reference[smiles]):
            bad += 1
    return bad


class Tally:
    """What the clients saw, added up under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.molecules = self.lost = self.misaligned = 0

    def add(self, seconds: float, molecules: int, lost: int, misaligned: int) -> None:
        with self.lock:
            if not lost:
                self.latencies.append(seconds)
                self.molecules += molecules
            self.lost += lost
            self.misaligned += misaligned


def client(port: int, pool: list[str], batch: int, until: float, seed: int,
           reference: dict[str, list], tally: Tally) -> None:
    """Send requests of ``batch`` random molecules until ``until``; check each answer."""
    rng = random.Random(seed)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while time.perf_counter() < until:
        sent = rng.sample(pool, batch)
        body = json.dumps({"smiles": sent}).encode()
        start = time.perf_counter()
        try:
            connection.request("POST", "/predict", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            text = response.read()
        except (OSError, http.client.HTTPException):
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            tally.add(0.0, 0, 1, 0)
            continue
        seconds = time.perf_counter() - start
        if response.status != 200:
            tally.add(seconds, 0, 1, 0)
            continue
        tally.add(seconds, len(sent), 0, misaligned_rows(sent, json.loads(text), reference))
    connection.close()


class Outcomes:
    """The statuses and seconds of requests whose answers are not checked row by row."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: collections.Counter = collections.Counter()
        self.seconds: list[float] = []

    def add(self, status: int | str, seconds: float) -> None:
        with self.lock:
            self.statuses[status] += 1
            self.seconds.append(seconds)

    def text(self) -> str:
        return ", ".join(f"{n} x {s}" for s, n in sorted(self.statuses.items(), key=str))


def slow_smiles(atoms: int) -> str:
    """A chain of ``atoms`` heavy atoms (N-C-C(=O) repeats, then carbons)."""
    return ("NCC(=O)" * (atoms // 4) + "C" * (atoms % 4)) or "C"


def post(port: int, path: str, body: bytes, headers: dict[str, str], timeout: float
         ) -> tuple[int | str, float]:
    """(status, or the error's name; seconds) of one POST on a new connection."""
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json", **headers})
        response = connection.getresponse()
        response.read()
        return response.status, time.perf_counter() - start
    except (OSError, http.client.HTTPException) as err:
        return type(err).__name__, time.perf_counter() - start
    finally:
        connection.close()


def repeat(until: float, send, outcomes: Outcomes) -> None:
    """Call ``send()`` (a ``post``) until ``until``, adding each outcome."""
    while time.perf_counter() < until:
        outcomes.add(*send())


def slow_client(port: int, atoms: int, until: float, outcomes: Outcomes) -> None:
    body = json.dumps({"smiles": [slow_smiles(atoms)]}).encode()
    repeat(until, lambda: post(port, "/explain", body, {}, 600), outcomes)


def gzip_body(pool: list[str], limit: int) -> bytes:
    """A gzip JSON body of random SMILES, compressed just under ``limit`` bytes (it
    expands to several times that)."""
    rng = random.Random(0)
    sample = rng.choices(pool, k=20_000)
    ratio = len(gzip.compress(json.dumps(sample).encode(), 6)) / len(json.dumps(sample))
    smiles = rng.choices(pool, k=int(0.95 * limit / ratio / len(json.dumps(sample)) * 20_000))
    packed = gzip.compress(json.dumps({"smiles": smiles}).encode(), 6)
    return packed[:limit]  # a truncated stream is still over the limit once expanded


def gzip_client(port: int, body: bytes, until: float, outcomes: Outcomes) -> None:
    repeat(until, lambda: post(port, "/predict", body, {"Content-Encoding": "gzip"}, 120),
           outcomes)


def run_threads(targets: list[tuple]) -> float:
    """Run ``(function, args)`` threads to their end; returns the wall seconds."""
    start = time.perf_counter()
    threads = [threading.Thread(target=fn, args=args) for fn, args in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def load(port: int, pool: list[str], args: argparse.Namespace, reference: dict[str, list],
         slow: Outcomes | None = None) -> tuple[Tally, float]:
    """Run the fast clients (with ``--slow-clients`` slow ones when ``slow`` is given);
    returns the fast clients' tally and the wall seconds."""
    tally = Tally()
    until = time.perf_counter() + args.seconds
    fast = args.clients - args.slow_clients
    targets = [(client, (port, pool, args.batch, until, seed, reference, tally))
               for seed in range(fast)]
    if slow is not None:
        targets += [(slow_client, (port, args.slow_atoms, until, slow))
                    for _ in range(args.slow_clients)]
    return tally, run_threads(targets)


def ctrl_c_seconds(server: subprocess.Popen, port: int, atoms: int) -> float:
    """Seconds from SIGINT, sent while slow explanations run, to the server's end."""
    until = time.perf_counter() + 3
    targets = [(slow_client, (port, atoms, until, Outcomes())) for _ in range(2)]
    starter = threading.Thread(target=run_threads, args=(targets,), daemon=True)
    starter.start()
    time.sleep(2)
    sent = time.perf_counter()
    server.send_signal(signal.SIGINT)
    while server.poll() is None and time.perf_counter() - sent < 60:
        time.sleep(0.05)
    return time.perf_counter() - sent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _latency_row(name: str, tally: Tally, wall: float) -> list[str]:
    lat = tally.latencies or [math.nan]
    return [name, str(len(tally.latencies) + tally.lost), str(tally.molecules),
            f"{tally.molecules / wall:.0f}", f"{1000 * statistics.median(lat):.0f}",
            f"{1000 * percentile(lat, 0.99):.0f}", str(tally.lost), str(tally.misaligned)]


def build_record(args: argparse.Namespace, pool: list[str], cli_seconds: float,
                 phases: dict, load_before: str) -> dict:
    (idle, idle_wall), (mixed, mixed_wall) = phases["idle"], phases["mixed"]
    slow, packed, memory = phases["slow"], phases["gzip"], phases["memory"]
    fast = args.clients - args.slow_clients
    anchor = len(pool) / cli_seconds
    rows = [_latency_row(f"setattn serve, {fast} fast clients x {args.batch} molecules, "
                         f"{args.workers} workers (idle: alone)", idle, idle_wall),
            _latency_row(f"the same fast clients with {args.slow_clients} clients explaining "
                         f"a {args.slow_atoms}-atom molecule (mixed)", mixed, mixed_wall),
            ["setattn predict, one process (the anchor; loading included)", "1",
             str(len(pool)), f"{anchor:.0f}", f"{1000 * cli_seconds:.0f}",
             f"{1000 * cli_seconds:.0f}", "0", "0"]]
    columns = ["path", "requests", "molecules", "molecules/s", "p50 ms", "p99 ms", "lost",
               "misaligned"]
    notes = (f"{len(pool)} molecules (FreeSolv and ESOL, 1 in 20 invalid), "
             f"{args.seconds:g} s of load per phase on 127.0.0.1; load average before: "
             f"{load_before}, after: {load_average()}. The server and the clients share "
             f"the machine's {os.cpu_count()} cores.")
    p99_idle, p99_mixed = (percentile(t.latencies or [math.nan], 0.99) for t in (idle, mixed))
    bound = 2 * p99_idle + args.budget
    hostile = [["slow /explain requests (mixed phase)", slow.text(),
                f"{statistics.median(slow.seconds or [math.nan]):.1f} s median"],
               ["fast p99, mixed / bound (2 x idle p99 + budget)",
                f"{1000 * p99_mixed:.0f} / {1000 * bound:.0f} ms",
                "within" if p99_mixed <= bound else "OVER"],
               ["gzip bodies under the size limit, expanding past it", packed.text(),
                f"{len(phases['gzip_body']):,} bytes each"],
               ["server peak memory (its own / largest worker / PSS of all)",
                f"{memory['parent_peak']:.0f} / {memory['child_peak']:.0f} / "
                f"{memory['pss_peak']:.0f} MB", "under 1 GB" if memory["pss_peak"] < 1024
                else "OVER 1 GB"],
               ["Ctrl-C while slow explanations run: seconds to the end",
                f"{phases['ctrl_c']:.1f} s", "within 5 s" if phases["ctrl_c"] < 5 else "OVER"]]
    summary = (f"{fast} fast clients for {args.seconds:g} s: p99 {1000 * p99_idle:.0f} ms "
               f"alone, {1000 * p99_mixed:.0f} ms beside {args.slow_clients} clients "
               f"explaining a {args.slow_atoms}-atom molecule (bound {1000 * bound:.0f} ms); "
               f"{idle.lost + mixed.lost} lost, {idle.misaligned + mixed.misaligned} rows "
               f"misaligned; Ctrl-C ended the server in {phases['ctrl_c']:.1f} s; peak "
               f"memory {memory['pss_peak']:.0f} MB (PSS) with gzip bodies at the limit.")
    return make_record("serve", "setattn serve under load", summary,
                       [table("Requests on the loopback", columns, rows, notes),
                        table("Hostile clients", ["case", "outcome", "note"], hostile,
                              f"--budget-seconds {args.budget:g}; the slow requests' "
                              f"statuses: 422 is a request stopped at its budget")],
                       threads=1, raw={"latencies_s": [round(x, 4) for x in mixed.latencies],
                                       "idle_latencies_s": [round(x, 4)
                                                            for x in idle.latencies],
                                       "model": Path(args.model).name})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(ROOT / "runs" / "freesolv"))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--slow-clients", type=int, default=4)
    parser.add_argument("--slow-atoms", type=int, default=289)
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not (Path(args.model) / "config.json").is_file():
        parser.error(f"--model {args.model}: no run there (make demo writes runs/freesolv)")
    if not 0 <= args.slow_clients < args.clients:
        parser.error("--slow-clients must be at least 0 and fewer than --clients")
    pool = molecule_pool()
    load_before = load_average()
    with tempfile.TemporaryDirectory() as folder:
        cli_seconds, reference = cli_predict(args.model, pool, Path(folder))
    port = free_port()
    server = start_server(args.model, port, args.workers, args.budget)
    memory: dict = {}
    watcher = threading.Thread(target=lambda: memory.update(watch_tree(server)), daemon=True)
    watcher.start()
    phases: dict = {"slow": Outcomes(), "gzip": Outcomes()}
    try:
        phases["idle"] = load(port, pool, args, reference)
        phases["mixed"] = load(port, pool, args, reference, phases["slow"])
        phases["gzip_body"] = body = gzip_body(pool, 2_000_000)
        until = time.perf_counter() + min(args.seconds, 20)
        run_threads([(gzip_client, (port, body, until, phases["gzip"])) for _ in range(4)])
        phases["ctrl_c"] = ctrl_c_seconds(server, port, args.slow_atoms)
    finally:
        server.terminate()
        server.wait(30)
    watcher.join(5)
    phases["memory"] = memory
    finish(build_record(args, pool, cli_seconds, phases, load_before), args.out)
    lost = sum(phases[p][0].lost + phases[p][0].misaligned for p in ("idle", "mixed"))
    return 0 if lost == 0 and set(phases["gzip"].statuses) == {413} else 1


if __name__ == "__main__":
    sys.exit(main())
