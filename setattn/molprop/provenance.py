"""What a run was trained on: a fingerprint of its CSV, checked again on ``--resume``.

``split.json`` records, beside the rows of each part, the CSV's SHA-256, its number of
data rows, and a hash of each column the run reads (the SMILES by row, each target's
labels by row). ``--resume`` on a file whose bytes changed compares the columns: if the
SMILES or a target column changed, or rows were added, removed or reordered, it is
refused, naming what changed and how to start afresh; if only bytes the run does not
read changed (another column, line endings), it goes on and says so.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from setattn.datasets.files import file_sha256
from setattn.datasets.molecules import MoleculeSet

__all__ = ["check_same_data", "data_fingerprint"]


def _hash(values: list) -> str:
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()


def data_fingerprint(path: str | Path, molecules: MoleculeSet) -> dict:
    """The fingerprint of a featurised CSV (see the module docstring).

    Args:
        path: the CSV.
        molecules: what ``featurize_csv`` read from it.
    """
    smiles = sorted([(int(d.row), d.smiles) for d in molecules.data]
                    + [(int(f.row), f.smiles) for f in molecules.failures])
    targets = {}
    for t, name in enumerate(molecules.target_columns):
        labels = [(int(d.row), float(d.y[0, t])) for d in molecules.data]
        targets[name] = _hash([(row, None if math.isnan(y) else y) for row, y in labels])
    return {"file": Path(path).name, "sha256": file_sha256(Path(path)), "rows": len(smiles),
            "smiles": _hash(smiles), "targets": targets}


def check_same_data(stored: dict | None, current: dict, out: Path) -> str:
    """Refuse to resume a run on data that changed.

    Args:
        stored: the fingerprint in the run's ``split.json`` (None: a run saved before
            fingerprints, not checked).
        current: the fingerprint of the file now.
        out: the run directory, for the message.

    Returns:
        "" when the file is the same, else a note that only bytes the run does not use
        changed.

    Raises:
        ValueError: naming what changed and how to start a fresh run.
    """
    if stored is None or stored.get("sha256") == current["sha256"]:
        return ""
    changes = []
    if stored.get("rows") != current["rows"]:
        changes.append(f"{stored.get('rows')} data rows then, {current['rows']} now")
    if stored.get("smiles") != current["smiles"]:
        changes.append("the SMILES column (rows edited, added, removed or reordered)")
    old_targets = stored.get("targets", {})
    edited = [name for name, h in current["targets"].items() if old_targets.get(name) != h]
    if edited:
        changes.append(f"the labels of {', '.join(map(repr, edited))}")
    name = current["file"]
    if not changes:
        return (f"{name}: its bytes changed since the run started, but not the rows, SMILES "
                f"or labels the run uses; resuming")
    raise ValueError(
        f"argument --resume: {name} changed since the run in {out} started ("
        f"{'; '.join(changes)}): resuming would mix the old split with new data. Restore the "
        f"original file, or start a fresh run on the new one with another --output-dir "
        f"(or after deleting {out})")
