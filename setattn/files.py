"""Writing files so that readers never see half of one; JSON without NaN.

``atomic_open`` writes a temporary file beside the target and renames it over the
target, so the target must be a regular file or a new name: ``check_output_target``
refuses a device (``/dev/full``), a FIFO, a socket or a symbolic link, which the rename
would replace by a regular file; ``atomic_open`` checks again as it opens. A write
that fails (a full disk) names the file.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_open", "check_folder", "check_output_file", "check_output_target", "json_safe",
           "write_json"]

_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))


def check_output_target(path: str | Path, argument: str = "--output") -> Path:
    """``path`` as a file that ``atomic_open`` may write: a new name, or a regular file.

    Raises:
        ValueError: naming ``argument`` and what ``path`` is when it is a symbolic link
            (the rename would replace the link, not the file it points to; its target is
            named), a device, a FIFO, a socket or a directory.
    """
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as err:
        raise ValueError(f"argument {argument}: cannot inspect {path} ({err.strerror})") \
            from None
    if stat.S_ISLNK(mode):
        raise ValueError(f"argument {argument}: {path} is a symbolic link (to "
                         f"{os.readlink(path)}); the file written would replace the link, "
                         f"so give the file's own path or another name")
    for test, kind in _KINDS:
        if test(mode):
            raise ValueError(f"argument {argument}: {path} is {kind}, not a regular file; "
                             f"setattn writes a new file and renames it into place, which "
                             f"would replace it; give a file name")
    return path


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, sync: bool = True,
                **kwargs: Any) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` at once.

    Readers see the old file or the complete new one, never half a file; if the
    block raises (or the process dies), ``path`` is untouched and the temporary
    file is removed (or left as a dot file). An ``OSError`` that names no file (a
    write to a full disk) is raised again naming ``path``.

    Args:
        path: the file to write.
        mode: "w" (text) or "wb" (bytes).
        sync: flush the new file to the disk (fsync) before it replaces ``path``, so that
            it survives a power loss too; False for files cheap to lose (a log rewritten
            every epoch): a crashed process still leaves the old or the new file whole.
        kwargs: passed to ``open`` (e.g. ``encoding``, ``newline``).

    Raises:
        ValueError: if ``path`` is a symbolic link, a device, a FIFO, a socket or a
            directory (``check_output_target``).
    """
    path = check_output_target(path, "path")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename is not None:
            raise
        # a failed write (a full disk) names no file: name the one being written
        raise OSError(err.errno, err.strerror or str(err), str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def json_safe(obj: Any) -> Any:
    """Floats stay floats, NaN and infinities become None (JSON has neither); dicts,
    lists and tuples recurse."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(obj: Any, path: str | Path) -> None:
    """``obj`` as indented JSON (``json_safe``), written atomically."""
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(json_safe(obj), handle, indent=2)
        handle.write("\n")


def _existing_ancestor(path: Path) -> Path:
    """The nearest existing folder (or file) at or above ``path``."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_folder(path: Path, argument: str) -> None:
    """The folder ``path`` is in, or would be created in, must be a writable folder."""
    ancestor = _existing_ancestor(path.parent)
    if not ancestor.is_dir():
        raise ValueError(f"argument {argument}: {ancestor} is a file, not a folder, so "
                         f"{path} cannot be created")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"argument {argument}: cannot write in {ancestor} (permission "
                         f"denied)")


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
            cannot be created, is one of ``inputs``, or is a device, FIFO, socket or
            link (``check_output_target``).
    """
    if str(output).endswith(("/", os.sep)):  # Path() would drop the slash
        raise ValueError(f"argument {argument}: {output} ends in '/', so it names a folder; "
                         f"give a file name")
    output = Path(output)
    if output.is_dir():
        raise ValueError(f"argument {argument}: {output} is a directory; give a file name")
    check_folder(output, argument)
    for name, path in inputs.items():
        # only an existing output can be an input (by any name: a link, a hard link, ..)
        if path is not None and output.exists() and Path(path).exists() \
                and os.path.samefile(output, path):
            raise ValueError(f"argument {argument}: {output} is the same file as {name} "
                             f"{path}; writing it would replace that input; choose another "
                             f"file name")
    return check_output_target(output, argument)
