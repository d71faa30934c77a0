"""Writing files so that readers never see half of one; JSON without NaN."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_open", "json_safe", "write_json"]


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, sync: bool = True,
                **kwargs: Any) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` at once.

    Readers see the old file or the complete new one, never half a file; if the
    block raises (or the process dies), ``path`` is untouched and the temporary
    file is removed (or left as a dot file).

    Args:
        path: the file to write.
        mode: "w" (text) or "wb" (bytes).
        sync: flush the new file to the disk (fsync) before it replaces ``path``, so that
            it survives a power loss too; False for files cheap to lose (a log rewritten
            every epoch): a crashed process still leaves the old or the new file whole.
        kwargs: passed to ``open`` (e.g. ``encoding``, ``newline``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
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
