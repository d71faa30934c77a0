"""Copy the pictures of the molecule tutorial from a ``make demo`` run into the guide.

    make demo                          # trains into runs/freesolv, draws both pictures
    python docs/make_pictures.py       # from the repository root; rewrites the PNGs

``setattn train`` draws ``runs/freesolv/curve.png`` (training loss and validation RMSE
per epoch, one line per ensemble member) and ``setattn explain`` draws
``runs/freesolv/explain.png`` (each atom's contribution to one prediction). The guide
shows them as ``docs/guide/_static/freesolv_curve.png`` and
``docs/guide/_static/freesolv_explain.png``; each must stay under 200 KB.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "docs" / "guide" / "_static"
PICTURES = {"curve.png": "freesolv_curve.png", "explain.png": "freesolv_explain.png"}
MAX_BYTES = 200_000


def copy_pictures(run: Path, static: Path = STATIC) -> list[Path]:
    """Copy the run's pictures into ``static``; returns the written paths.

    Raises:
        FileNotFoundError: a picture is missing (run ``make demo`` first).
        ValueError: a picture is 200 KB or more.
    """
    written = []
    for source_name, target_name in PICTURES.items():
        source = run / source_name
        if not source.is_file():
            raise FileNotFoundError(f"{source} is missing: run `make demo` first")
        if source.stat().st_size >= MAX_BYTES:
            raise ValueError(f"{source} is {source.stat().st_size} bytes, over {MAX_BYTES}")
        target = static / target_name
        shutil.copyfile(source, target)
        written.append(target)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "freesolv",
                        help="run directory of `make demo` (default: runs/freesolv)")
    args = parser.parse_args()
    try:
        written = copy_pictures(args.run)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1000} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
