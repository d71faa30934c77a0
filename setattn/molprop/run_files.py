"""Where runs and predictions are written: checked before any work, claimed atomically.

- ``check_output_file``: a file to write (``predict --output``, ``explain --output``)
  must not be a directory, nor lie under a file, nor be one of the inputs (the same
  file by any name: a link, ``./x.csv``), and its folder must be writable.
- ``check_output_dir``: a run directory must be a directory (or creatable as one).
- ``check_run_dir``: the one rule of every writer of a run (``setattn train``,
  ``MoleculePredictor.fit`` and ``save``): a run folder is created new (or is an empty
  folder), or is a setattn run, recognised by its marker file ``.setattn-run`` (written
  first, before any other file of the run); any other folder is refused with a message
  naming the files of it that the run would replace. ``check_not_destination``: no
  input of the run (its CSV) is one of the files it writes, by resolved path.
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
import re
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["LOCK_NAME", "RUN_MARKER", "RUN_RECORDS", "RunLock", "check_not_destination",
           "check_output_dir", "check_output_file", "check_prediction_columns",
           "check_run_dir", "mark_run_dir", "prediction_columns", "run_file_paths"]

LOCK_NAME = ".setattn.lock"
"""The lock file of a run directory."""

RUN_MARKER = ".setattn-run"
"""The marker file that says "this folder is a setattn run" (the first file of a run)."""


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
        ValueError: naming ``argument`` if ``output`` is a directory (or ends in "/"),
            cannot be created, or is one of ``inputs``.
    """
    if str(output).endswith(("/", os.sep)):  # Path() would drop the slash
        raise ValueError(f"argument {argument}: {output} ends in '/', so it names a folder; "
                         f"give a file name")
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


_MEMBER = re.compile(r"model_\d+")  # an ensemble member's folder of checkpoints


def _would_replace(out: Path, extra: Sequence[str]) -> list[str]:
    """The entries of the folder ``out`` that a run would write over: its records,
    ``extra`` names and ``model_<k>`` folders."""
    names = {*RUN_RECORDS, *extra}
    return sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir()
                  if p.name in names or _MEMBER.fullmatch(p.name))


def check_run_dir(out: str | Path, argument: str = "--output-dir", *,
                  resume: bool = False, extra: Sequence[str] = ()) -> Path:
    """A run folder: absent (it will be created), empty, or a setattn run (its marker
    file ``RUN_MARKER``; with ``resume``, also a run written before markers existed:
    one with a ``config.json``).

    Args:
        out: the folder.
        argument: the flag or keyword naming it, for messages.
        resume: the run continues one already in ``out``.
        extra: file names the writer adds to a run's records (the API's ``data.csv``).

    Raises:
        ValueError: naming ``argument``, if ``out`` is a file or not writable, or is a
            folder of other files (the message names those the run would replace).
    """
    out = check_output_dir(out, argument)
    if not out.is_dir() or (out / RUN_MARKER).is_file():
        return out
    if resume and (out / "config.json").is_file():
        return out
    present = sorted(p.name for p in out.iterdir() if p.name != LOCK_NAME)  # RunLock's
    if not present:
        return out
    replaced = _would_replace(out, extra)
    what = (f"the run would replace {', '.join(replaced)}" if replaced
            else f"it holds {', '.join(present[:5])}{' ...' if len(present) > 5 else ''}")
    raise ValueError(f"argument {argument}: {out} is a folder of other files, not a "
                     f"setattn run (no {RUN_MARKER} in it): {what}; choose a new or "
                     f"empty folder")


def mark_run_dir(out: str | Path) -> Path:
    """Create the folder ``out`` if needed and its marker file (kept if present): the
    first file of a run. Call ``check_run_dir`` first. Returns the marker."""
    marker = Path(out) / RUN_MARKER
    if not marker.is_file():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"setattn": "run"}) + "\n", encoding="utf-8")
    return marker


def check_not_destination(out: str | Path, inputs: Mapping[str, str | Path | None],
                          members: int, argument: str = "--output-dir") -> None:
    """No input may be a file the run in ``out`` writes (its records, marker, lock or
    a member's ``best.pt`` / ``last.pt``), compared by resolved path.

    Raises:
        ValueError: naming the input's argument and the file.
    """
    out = Path(out).resolve()
    writes = {out / name for name in (*RUN_RECORDS, RUN_MARKER, LOCK_NAME)}
    writes |= {out / f"model_{k}" / f for k in range(members) for f in ("best.pt", "last.pt")}
    for name, path in inputs.items():
        if path is not None and Path(path).resolve() in writes:
            raise ValueError(f"argument {name}: {path} is a file the run in {out} writes "
                             f"({Path(path).name}); it would be replaced; move it out of "
                             f"{argument} or choose another folder")

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
        resume: the run continues one in ``out`` (see ``check_run_dir``).
    """

    def __init__(self, out: str | Path, resume: bool = False) -> None:
        self.out = Path(out)
        self.resume = resume
        self.path = self.out / LOCK_NAME
        self.created = False  # the directory was made by this claim
        self.marked = False  # its marker was written by this claim
        self.held = False

    def acquire(self) -> None:
        """Create the directory if needed and the lock file, exclusively; then the
        run's marker (``mark_run_dir``).

        Raises:
            ValueError: naming ``--output-dir`` if another run holds the directory, or
                a dead one left its lock (stale: how to clear it is in the message), or
                the directory cannot be made, or is a folder of other files
                (``check_run_dir``).
        """
        check_run_dir(self.out, resume=self.resume)
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
        self.marked = not (self.out / RUN_MARKER).is_file()
        mark_run_dir(self.out)

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
        """Remove the lock; the marker this claim wrote, where nothing else was
        written, and a directory this claim created, where it is then empty, go too (a
        refused run leaves nothing behind)."""
        if not self.held:
            return
        self.path.unlink(missing_ok=True)
        self.held = False
        if self.marked and [p.name for p in self.out.iterdir()] == [RUN_MARKER]:
            (self.out / RUN_MARKER).unlink(missing_ok=True)
        if self.created:
            try:
                self.out.rmdir()  # only if empty
            except OSError:
                pass
