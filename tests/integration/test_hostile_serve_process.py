"""``setattn serve`` as a process: Ctrl-C ends it within seconds while slow work runs
(the work is stopped, its worker processes end with it), a port in use is a one-line
error before anything is printed, and no command leaves PyG's generated module files in
the temporary folder."""

from __future__ import annotations

import concurrent.futures
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from molecule_runs import freesolv_slice, subprocess_env

pytest.importorskip("fastapi", reason="setattn serve needs the serve extra (fastapi)")
pytest.importorskip("uvicorn", reason="setattn serve needs the serve extra (uvicorn)")

from serve_helpers import post_json, request, tiny_run  # noqa: E402

pytestmark = pytest.mark.slow  # each test starts a setattn process (seconds of imports)

SLOW_EXPLAIN = {"smiles": ["NCC(=O)" * 25], "method": "occlusion"}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return tiny_run(tmp_path_factory.mktemp("serve-process"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(run: Path, port: int, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "setattn.cli", "serve", "--model", str(run),
                             "--port", str(port)], env=env or subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_up(proc: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            request(url, "GET", "/model", timeout=5)
            return
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(p) for p in task.read_text().split()]
    return found


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return True
    return status == "Z"  # ended, not yet reaped


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_ctrl_c_ends_serve_within_seconds_while_slow_work_runs(run, tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    folder = tmp_path / "tmp"
    folder.mkdir()
    proc = _serve(run, port, {**subprocess_env(), "TMPDIR": str(folder)})
    try:
        _wait_up(proc, url)
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            slow = [pool.submit(post_json, url, "/explain", SLOW_EXPLAIN) for _ in range(2)]
            fast = [pool.submit(post_json, url, "/predict", {"smiles": ["CCO"] * 20})
                    for _ in range(4)]
            assert all(f.result()[0] == 200 for f in fast)
            workers = _children(proc.pid)
            assert len(workers) == 2
            sent = time.perf_counter()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
            took = time.perf_counter() - sent
            for future in slow:  # answered or cut off, never left hanging
                try:
                    future.result(timeout=10)
                except OSError:
                    pass
    finally:
        proc.kill()
    # the grace is 2 s and uvicorn's 4 s; the explanations left running would take 28 s
    assert took < 15, (took, err)
    assert proc.returncode in (0, 130), err
    assert "Traceback" not in err
    assert all(_gone(pid) for pid in workers)
    assert list(folder.iterdir()) == []  # PyG's generated module files removed too


def test_a_port_in_use_is_one_line_before_anything_is_printed(run):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "setattn.cli", "serve", "--model",
                              str(run), "--port", str(port)], env=subprocess_env(),
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out
    assert out.stderr.strip().splitlines() == [
        f"setattn serve: error: argument --port: 127.0.0.1:{port} is in use by another "
        f"program (another setattn serve?); choose another --port"]


def test_no_command_leaves_pygs_generated_files(run, tmp_path):
    folder = tmp_path / "tmp"
    folder.mkdir()
    data = freesolv_slice(tmp_path / "fs.csv", 5)
    env = {**subprocess_env(), "TMPDIR": str(folder)}
    out = subprocess.run([sys.executable, "-m", "setattn.cli", "predict", "--model", str(run),
                          "--data", str(data), "--output", str(tmp_path / "p.csv")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    probe = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == str(folder)  # PyG writes where this names
    assert sorted(p.name for p in folder.iterdir()) == []
