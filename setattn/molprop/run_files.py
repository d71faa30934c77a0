"""Where runs and predictions are written: checked before any work, claimed atomically.

- ``check_output_file``: a file to write (``predict --output``, ``explain --output``)
  must not be a directory, nor lie under a file, nor be one of the inputs (the same
  file by any name: a link, ``./x.csv``), and its folder must be writable.
- ``check_output_dir``: a run directory must be a directory (or creatable as one).
- ``RunLock``: a run directory is claimed by creating ``.setattn.lock`` in it with
  ``O_CREAT | O_EXCL``, which exactly one process can do; a second run into the same
  directory is refused while the first one holds it. The lock is removed when the run
  ends (success, error or Ctrl-C); a run killed outright (SIGKILL, power loss) leaves
  it behind, and the next run reports it as stale, with the dead process's id and how
  to clear it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["LOCK_NAME", "RUN_RECORDS", "RunLock", "check_output_dir", "check_output_file",
           "check_prediction_columns", "prediction_columns", "run_file_paths"]

LOCK_NAME = ".setattn.lock"
"""The lock file of a run directory."""


def _existing_ancestor(path: Path) -> Path:
    """The nearest existing folder (or file) at or above ``path``."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_folder(path: Path, argument: str) -> None:
    """The folder ``path`` is in, or would be created in, must be a writable folder."""
    ancestor = _existing_ancestor(path.parent)
    if not ancestor.is_dir():
        raise ValueError(f"argument {argument}: {ancestor} is a file, not a folder, so "
                         f"{path} cannot be created")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"argument {argument}: cannot write in {ancestor} (permission "
                         f"denied)")


RUN_RECORDS = ("config.json", "metrics.json", "split.json", "log.csv", "curve.png")
"""A run directory's own records: ``predict`` reads the first two, ``--resume`` the first
three; no command's output may replace them."""


def prediction_columns(smiles_column: str, targets: Sequence[str], ensemble: bool,
                       intervals: bool) -> list[str]:
    """The header of ``setattn predict``'s output: the SMILES column, one column per
    target, ``<target>_std`` for an ensemble, ``<target>_lower`` / ``_upper`` with
    intervals, and ``error``."""
    header = [smiles_column, *targets]
    if ensemble:
        header += [f"{t}_std" for t in targets]
    if intervals:
        header += [f"{t}_{end}" for t in targets for end in ("lower", "upper")]
    return [*header, "error"]


def check_prediction_columns(smiles_column: str, targets: Sequence[str],
                             argument: str = "--target-columns") -> None:
    """Raise a ValueError naming ``argument`` if ``predict``'s output for these targets
    (an ensemble's, with intervals: every column it may write) would repeat a name, so
    that a reader of the file would lose one of the two (e.g. a target named "error")."""
    header = prediction_columns(smiles_column, targets, ensemble=True, intervals=True)
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise ValueError(f"argument {argument}: predict's output would hold two columns "
                         f"named {', '.join(map(repr, twice))} (it writes the targets, "
                         f"<target>_std, _lower, _upper and 'error'); rename that column "
                         f"of the CSV")


def run_file_paths(model: Path) -> dict[str, Path]:
    """The files of the run ``--model`` names (its records and weights), which no output
    may be, by a name for error messages."""
    if model.is_file():
        return {"--model": model}
    files = {f"--model's {name}": model / name for name in RUN_RECORDS}
    for f in sorted(model.glob("model_*/*.pt")):
        files[f"--model's {f.parent.name}/{f.name}"] = f
    return files


def check_output_file(output: str | Path, inputs: Mapping[str, str | Path | None],
                      argument: str = "--output") -> Path:
    """Check a file about to be written, before any work is done.

    Args:
        output: the file.
        inputs: the files the command reads, by the argument that named them.
        argument: the argument naming ``output``.

    Returns:
        ``output`` as a ``Path``.

    Raises:
        ValueError: naming ``argument`` if ``output`` is a directory, cannot be
            created, or is one of ``inputs``.
    """
    output = Path(output)
    if output.is_dir():
        raise ValueError(f"argument {argument}: {output} is a directory; give a file name")
    _check_folder(output, argument)
    for name, path in inputs.items():
        # only an existing output can be an input (by any name: a link, a hard link, ..)
        if path is not None and output.exists() and Path(path).exists() \
                and os.path.samefile(output, path):
            raise ValueError(f"argument {argument}: {output} is the same file as {name} "
                             f"{path}; writing it would replace that input; choose another "
                             f"file name")
    return output


def check_output_dir(out: str | Path, argument: str = "--output-dir") -> Path:
    """A run directory: an existing folder, or one that can be created.

    Raises:
        ValueError: naming ``argument`` if ``out`` is a file or lies under one, or its
            folder is not writable.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"argument {argument}: {out} is a file, not a directory")
    if out.is_dir():
        if not os.access(out, os.W_OK | os.X_OK):
            raise ValueError(f"argument {argument}: cannot write in {out} (permission denied)")
        return out
    _check_folder(out, argument)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


class RunLock:
    """The claim of a run directory by one process (see the module docstring).

    Args:
        out: the run directory (created by ``acquire`` if missing).
    """

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.path = self.out / LOCK_NAME
        self.created = False  # the directory was made by this claim
        self.held = False

    def acquire(self) -> None:
        """Create the directory if needed and the lock file, exclusively.

        Raises:
            ValueError: naming ``--output-dir`` if another run holds the directory, or
                a dead one left its lock (stale: how to clear it is in the message), or
                the directory cannot be made.
        """
        check_output_dir(self.out)
        self.created = not self.out.exists()
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            raise ValueError(self._held_message()) from None
        except OSError as err:
            raise ValueError(f"argument --output-dir: cannot create {self.path} "
                             f"({err.strerror})") from None
        with os.fdopen(fd, "w") as handle:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}, handle)
        self.held = True

    def _held_message(self) -> str:
        try:
            owner = json.loads(self.path.read_text())
            pid, host = int(owner["pid"]), str(owner["host"])
            started = str(owner.get("started", "?"))
        except (OSError, ValueError, KeyError, TypeError):
            return (f"argument --output-dir: {self.out} is in use by another setattn run "
                    f"(its lock {self.path} exists); wait for it to end or choose another "
                    f"directory")
        if host == socket.gethostname() and not _alive(pid):
            return (f"argument --output-dir: {self.out} has a stale lock: {self.path} was "
                    f"left by a run (pid {pid}, started {started}) that is no longer "
                    f"running (killed?); if no other run uses {self.out}, delete "
                    f"{self.path} and run the command again (--resume continues that run)")
        return (f"argument --output-dir: {self.out} is in use by another setattn run (pid "
                f"{pid} on {host}, started {started}); wait for it to end or choose another "
                f"directory")

    def release(self) -> None:
        """Remove the lock; a directory this claim created and nothing else was written
        to is removed too (a refused run leaves nothing behind)."""
        if not self.held:
            return
        self.path.unlink(missing_ok=True)
        self.held = False
        if self.created:
            try:
                self.out.rmdir()  # only if empty
            except OSError:
                pass
