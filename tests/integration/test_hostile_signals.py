"""A command stops when asked even inside a call Python cannot interrupt: the watchdog
of ``setattn.cli.process.end_when_stuck`` ends the process ``GRACE_SECONDS`` after a
SIGTERM the main thread could not act on (a long eigendecomposition, as a kernel ridge's
fit of 20,000 molecules makes), and a forked child's own SIGTERM never ends its parent."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from molecule_runs import subprocess_env

from setattn.cli.process import GRACE_SECONDS

SCRIPT = """
import multiprocessing, os, signal, sys, time
import torch
from setattn.cli import process
if sys.argv[1] == "early":  # the child's SIGTERM comes before setattn's fork hook runs
    os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))
process.set_up("train", 1)
if sys.argv[1] in ("child", "early"):  # a forked worker stopped with SIGTERM: the parent goes on
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()
    time.sleep(0.5)
    child.terminate()
    child.join()
    time.sleep(GRACE + 2)
    print("parent still running", flush=True)
    sys.exit(0)
a = torch.randn(4000, 4000, dtype=torch.float64)
a = a @ a.T
print("ready", flush=True)
while True:
    torch.linalg.eigh(a)  # one call into LAPACK: seconds without a bytecode boundary
"""


def _start(mode: str) -> subprocess.Popen:
    code = SCRIPT.replace("GRACE", repr(GRACE_SECONDS))
    return subprocess.Popen([sys.executable, "-c", code, mode], env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sigterm_inside_a_long_c_call_ends_the_command_after_the_grace():
    process = _start("eigh")
    try:
        assert process.stdout.readline().strip() == "ready"
        time.sleep(1)  # inside the first eigendecomposition
        sent = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM
    # without the watchdog the loop runs until communicate's 60 s; a loaded machine may
    # take seconds more than the grace to end a process of this size
    assert time.perf_counter() - sent < GRACE_SECONDS + 15
    assert f"still running {GRACE_SECONDS:g} s after SIGTERM" in err


@pytest.mark.slow
@pytest.mark.parametrize("when", ["child", "early"])
def test_a_forked_childs_sigterm_never_ends_the_parent(when):
    """``early``: the SIGTERM reaches the child right after the fork, before it has
    forgotten the wakeup descriptor it shares with the parent."""
    process = _start(when)
    try:
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "parent still running" in out


RDKIT_THREADS = """
import os, signal, sys, threading, time
from rdkit import Chem
from setattn.cli import process
process.set_up("predict", 1)
mol, pattern = Chem.MolFromSmiles("c1ccccc1" * 30), Chem.MolFromSmarts("[#6]~[#6]~[#6]")
def search():
    for _ in range(30):
        mol.GetSubstructMatches(pattern, maxMatches=100000)
threads = [threading.Thread(target=search) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
time.sleep(2)  # the keeper looks every 0.2 s; a loaded machine may delay it
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(3)
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.slow
def test_rdkit_searches_in_threads_leave_ctrl_c_to_the_command():
    """Two substructure searches at once leave RDKit's SIGINT handler installed (each
    puts back the one it found); the command's keeper puts Python's back."""
    out = subprocess.run([sys.executable, "-c", RDKIT_THREADS], env=subprocess_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "interrupted", out.stderr
