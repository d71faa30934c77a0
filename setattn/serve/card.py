"""A run's card for ``setattn serve``: what the model predicts, on what it was trained,
how well it did on its test part, and with which options, from the files of the run
directory (read, never written).

Only names, numbers and options leave the server: the training CSV appears by its file
name, never by its path on the server.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

__all__ = ["model_card"]

_OPTIONS = ("split", "seed", "ensemble_size", "kernel_ridge", "max_heavy_atoms", "strict")
"""The run-level settings of ``config.json`` the card shows (beside train and model)."""


def _json(path: Path) -> dict:
    """A JSON object from ``path`` ({} where there is no such file or it is not one)."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _trained(path: Path) -> str | None:
    """When ``path`` (``metrics.json``, written as a run ends) was last written, in UTC."""
    try:
        seconds = path.stat().st_mtime
    except OSError:
        return None
    when = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def _interval(metrics: dict, meta: dict) -> dict | None:
    """The prediction interval: its level, what scales it, its coverage on the test part."""
    calibration = meta.get("conformal")
    if calibration is None:
        return None
    test = metrics.get("uncertainty", {}).get("test", {})
    return {"level": calibration.level, "scaled_by": calibration.spread,
            "test_coverage": test.get("coverage"), "test_mean_width": test.get("mean_width")}


def _options(config: dict) -> dict[str, Any]:
    """The options the run was trained with (the data set by its file name only)."""
    options: dict[str, Any] = {k: config[k] for k in _OPTIONS if k in config}
    if config.get("data"):
        options["data"] = Path(str(config["data"])).name
    for section in ("train", "model"):
        if isinstance(config.get(section), dict):
            options[section] = dict(config[section])
    return options


def model_card(run_dir: Path, meta: dict, members: int) -> dict[str, Any]:
    """The card of a loaded run.

    Args:
        run_dir: the run directory (or one ``best.pt``, whose folder holds no card files).
        meta: ``load_run``'s metadata of the run.
        members: the ensemble's size.

    Returns:
        name, task, targets, smiles_column, members, molecules (the training CSV's
        usable molecules), split (train / val / test sizes), test and val metrics per
        ``metrics.json``, interval (level, coverage; None for classification), trained
        (when ``metrics.json`` was written) and options.
    """
    folder = run_dir if run_dir.is_dir() else run_dir.parent
    metrics = _json(folder / "metrics.json") if run_dir.is_dir() else {}
    config = _json(folder / "config.json") if run_dir.is_dir() else {}
    split = metrics.get("split", {})
    return {
        "name": run_dir.name, "task": meta.get("task"), "targets": list(meta["target_columns"]),
        "smiles_column": meta.get("smiles_column", "smiles"), "members": members,
        "molecules": metrics.get("molecules"),
        "split": {k: split.get(k) for k in ("type", "train", "val", "test") if k in split},
        "test": metrics.get("test"), "val": metrics.get("val"),
        "interval": _interval(metrics, meta),
        "trained": _trained(folder / "metrics.json") if metrics else None,
        "options": _options(config),
    }
