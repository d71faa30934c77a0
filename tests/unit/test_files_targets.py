"""``setattn.files``: ``atomic_open`` renames a new file over its target, so a target
that is not a regular file is refused (never replaced), and a failed write names the
file."""

from __future__ import annotations

import errno
import os
import socket
import stat

import pytest

from setattn.files import atomic_open, check_output_target


def test_new_names_and_regular_files_are_writable_targets(tmp_path):
    assert check_output_target(tmp_path / "new.csv") == tmp_path / "new.csv"
    (tmp_path / "old.csv").write_text("old\n")
    with atomic_open(tmp_path / "old.csv") as handle:
        handle.write("new\n")
    assert (tmp_path / "old.csv").read_text() == "new\n"


@pytest.mark.parametrize("kind", ["fifo", "socket", "symlink", "directory"])
def test_special_targets_are_refused_and_left_as_they_are(tmp_path, kind):
    path = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "symlink":
        (tmp_path / "real").write_text("mine\n")
        path.symlink_to(tmp_path / "real")
    else:
        path.mkdir()
    mode = os.lstat(path).st_mode
    with pytest.raises(ValueError, match=f"argument --out: {path} is a"):
        check_output_target(path, "--out")
    with pytest.raises(ValueError, match=f"argument path: {path} is a"):
        with atomic_open(path) as handle:
            handle.write("x")
    assert stat.S_IFMT(os.lstat(path).st_mode) == stat.S_IFMT(mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["target", *(["real"] if kind == "symlink" else [])])


def test_a_write_that_fails_without_a_file_name_is_named(tmp_path, monkeypatch):
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as caught:
        with atomic_open(tmp_path / "out.csv") as handle:
            handle.write("x\n")
    assert caught.value.filename == str(tmp_path / "out.csv")
    assert caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone
