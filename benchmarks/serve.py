"""``setattn serve`` under load: concurrent clients on the loopback, against ``setattn
predict`` on the same molecules.

Run:  .venv/bin/python benchmarks/serve.py [--model runs/freesolv] [--clients 16]
          [--seconds 60] [--batch 20] [--workers 2] [--out RECORD]
      (``make demo`` makes runs/freesolv; writes results/serve.json)

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
import csv
import http.client
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import finish, load_average, make_record, table  # noqa: E402

from setattn.datasets import DATASETS_DIR  # noqa: E402

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


def start_server(model: str, port: int, workers: int) -> subprocess.Popen:
    """``setattn serve`` on the loopback, once it answers ``GET /model``."""
    proc = subprocess.Popen([sys.executable, "-m", "setattn.cli", "serve", "--model", model,
                             "--port", str(port), "--workers", str(workers)], env=env(),
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


def load(port: int, pool: list[str], args: argparse.Namespace,
         reference: dict[str, list]) -> tuple[Tally, float]:
    """Run the clients; returns their tally and the wall seconds."""
    tally = Tally()
    start = time.perf_counter()
    until = start + args.seconds
    threads = [threading.Thread(target=client, args=(port, pool, args.batch, until, seed,
                                                      reference, tally))
               for seed in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally, time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def build_record(args: argparse.Namespace, pool: list[str], cli_seconds: float,
                 tally: Tally, wall: float, load_before: str) -> dict:
    served = tally.molecules / wall
    anchor = len(pool) / cli_seconds
    lat = tally.latencies
    rows = [[f"setattn serve, {args.clients} clients x {args.batch} molecules, "
             f"{args.workers} worker threads", str(len(lat) + tally.lost), str(tally.molecules),
             f"{served:.0f}", f"{1000 * statistics.median(lat):.0f}",
             f"{1000 * percentile(lat, 0.99):.0f}", str(tally.lost), str(tally.misaligned)],
            ["setattn predict, one process (the anchor; loading included)", "1",
             str(len(pool)), f"{anchor:.0f}", f"{1000 * cli_seconds:.0f}",
             f"{1000 * cli_seconds:.0f}", "0", "0"]]
    columns = ["path", "requests", "molecules", "molecules/s", "p50 ms", "p99 ms", "lost",
               "misaligned"]
    notes = (f"{len(pool)} molecules (FreeSolv and ESOL, 1 in 20 invalid), "
             f"{args.seconds:g} s of load on 127.0.0.1; load average before: {load_before}, "
             f"after: {load_average()}. The server and the clients share the machine's "
             f"{os.cpu_count()} cores.")
    summary = (f"{args.clients} concurrent clients for {args.seconds:g} s: "
               f"{len(lat) + tally.lost} requests, {tally.lost} lost, {tally.misaligned} rows "
               f"misaligned; {served:.0f} molecules/s served against {anchor:.0f} by "
               f"setattn predict on the same molecules (p50 {1000 * statistics.median(lat):.0f} "
               f"ms, p99 {1000 * percentile(lat, 0.99):.0f} ms per request).")
    return make_record("serve", "setattn serve under load", summary,
                       [table("Requests on the loopback", columns, rows, notes)],
                       threads=1, raw={"latencies_s": [round(x, 4) for x in lat],
                                       "model": Path(args.model).name})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(ROOT / "runs" / "freesolv"))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not (Path(args.model) / "config.json").is_file():
        parser.error(f"--model {args.model}: no run there (make demo writes runs/freesolv)")
    pool = molecule_pool()
    load_before = load_average()
    with tempfile.TemporaryDirectory() as folder:
        cli_seconds, reference = cli_predict(args.model, pool, Path(folder))
    port = free_port()
    server = start_server(args.model, port, args.workers)
    try:
        tally, wall = load(port, pool, args, reference)
    finally:
        server.terminate()
        server.wait(30)
    finish(build_record(args, pool, cli_seconds, tally, wall, load_before), args.out)
    return 0 if tally.lost == 0 and tally.misaligned == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
