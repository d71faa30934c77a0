"""``MoleculePredictor``: molecule property prediction from Python, ``fit`` / ``predict``.

    model = MoleculePredictor(epochs=30, seed=0)
    model.fit(smiles, y)                  # SMILES or RDKit Mols; y: (M,) or (M, T), NaN = missing
    p = model.predict(new_smiles)         # (M', T); NaN rows and model.errors for bad SMILES
    model.save("runs/sol")                # a run directory, as ``setattn train`` writes

Every ``fit`` is a ``setattn train`` run: it writes the SMILES and targets as a CSV into
the run directory and calls the same ``run_training`` with the ``RunConfig`` that the
same options give on the command line (``setattn.molprop.settings.new_run``), so the
same data, options and seed give the same models and the same ``metrics.json``.
``load`` reads any run directory, the command line's included, and ``setattn predict
--model DIR`` reads any that ``save`` wrote. The predictor is a scikit-learn estimator
(``get_params`` / ``set_params``, ``score``; ``clone``, ``Pipeline``, ``GridSearchCV``):
:mod:`setattn.molprop.estimator` says how.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from setattn.domains.descriptors import descriptor_set
from setattn.files import atomic_open, write_json
from setattn.molprop.checkpoint import load_run
from setattn.molprop.config import RunConfig
from setattn.molprop.device import resolve_device
from setattn.molprop.estimator import NOT_OPTIONS, EstimatorConventions, as_smiles
from setattn.molprop.explain import DEFAULT_METHOD, explain_smiles
from setattn.molprop.loop import quiet
from setattn.molprop.predict import predict_interval, predict_smiles
from setattn.molprop.run import run_training
from setattn.molprop.run_files import LOCK_NAME, check_run_dir, mark_run_dir
from setattn.molprop.settings import config_section, new_run, run_flags

__all__ = ["DATA_FILE", "MoleculePredictor"]

DATA_FILE = "data.csv"
"""The CSV that ``fit`` writes into the run directory (the run's ``--data``)."""

_NOT_OPTIONS = NOT_OPTIONS  # set by fit, or keywords of their own


def _smiles_list(items: Any, name: str) -> list[str]:
    """``as_smiles`` (SMILES, RDKit Mols, a pandas Series, a NumPy array); a mapping is
    refused: iterating it would predict its keys."""
    if isinstance(items, Mapping):
        raise TypeError(f"argument {name}: a {type(items).__name__} is not a list of SMILES "
                        f"(its keys would be read as the molecules); pass list(d.values()) "
                        f"or list(d)")
    return as_smiles(items, name)


def _targets(y: Any, rows: int, name: str) -> np.ndarray:
    """``y`` as a float64 (M, T) array of ``rows`` rows; NaN is a missing label.

    Raises:
        ValueError: naming ``name`` for a shape that does not fit, a value that is not a
            number, or an infinite one.
    """
    try:
        arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"argument {name}: not numbers ({err})") from None
    if arr.ndim == 1:
        arr = arr[:, None]  # (M, 1)
    if arr.ndim != 2 or arr.shape[0] != rows or arr.shape[1] < 1:
        raise ValueError(f"argument {name}: expected shape ({rows},) or ({rows}, T) for "
                         f"{rows} SMILES, got {np.shape(y)}")
    bad = np.argwhere(np.isinf(arr))
    if bad.size:
        row, col = bad[0]
        raise ValueError(f"argument {name}: row {row}, column {col}: {arr[row, col]} is not "
                         f"finite (use NaN for a missing label)")
    return arr


def _as_names(names: str | Sequence[str] | None) -> list[str] | None:
    """``target_columns`` as a list (one name given as a string: a list of one)."""
    return [names] if isinstance(names, str) else None if names is None else list(names)


def _cell(value: float) -> str:
    """A target as CSV text that reads back as the same float ("" for NaN)."""
    return "" if math.isnan(value) else repr(value)


def _write_data(path: Path, header: list[str], smiles: list[str], y: np.ndarray,
                parts: list[str] | None) -> None:
    """The run's CSV: SMILES, one column per target, and the part of each row if given."""
    with atomic_open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for m, text in enumerate(smiles):
            row = [text, *(_cell(float(v)) for v in y[m])]
            writer.writerow(row + [parts[m]] if parts is not None else row)


class MoleculePredictor(EstimatorConventions):
    """A molecule property predictor with the options of ``setattn train``; a
    scikit-learn regressor (``task="regression"``) or classifier.

    Args:
        task: "regression" or "classification" (0/1 labels, one binary task per column).
        descriptors: "rdkit" (RDKit's 2D descriptors in the readout) or "none".
        output_dir: the run directory ``fit`` writes (None: a temporary one, removed
            with this object; ``save`` keeps a copy).
        verbose: print the epoch lines and messages of ``setattn train``.
        **options: any ``setattn train`` flag as a keyword, named like its field:
            ``epochs``, ``batch_size``, ``lr``, ``seed``, ``split``, ``split_sizes``,
            ``ensemble_size``, ``hidden``, ``device`` ("auto", "cpu", "cuda[:N]"),
            ``precision`` ... (``target_columns`` names the columns of ``y``);
            defaults as on the command line.

    Attributes:
        models_: the trained (or loaded) ensemble, in eval mode (also ``models``).
        metrics_: ``metrics.json`` of the run, None if there is none (also ``metrics``).
        meta_: the checkpoint's metadata (also ``meta``).
        run_dir_: the run directory the models come from (also ``run_dir``).
        errors: (index, SMILES, reason) of each SMILES the last ``predict`` or
            ``predict_std`` could not parse or skipped (NaN rows).
        notes: (index, SMILES, note) of each SMILES predicted with a remark (a salt
            or mixture: its largest fragment was predicted; isotopes stripped; dummy
            atoms or elements the model has not seen: ``setattn.domains.atom_notes``).

    Raises:
        TypeError: for a keyword that is not an option.
        ValueError: naming the option whose value is out of range (CUDA asked for where
            there is none included); a ``SettingError``.
    """

    def __init__(self, task: str = "regression", *, descriptors: str = "rdkit",
                 output_dir: str | Path | None = None, verbose: bool = True,
                 **options: Any) -> None:
        allowed = self.option_keywords()
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise TypeError(f"MoleculePredictor: unknown option(s) {unknown}; options: "
                            f"{allowed} and descriptors, output_dir, verbose")
        # stored as given (scikit-learn's clone checks that); a path becomes a Path once
        self.task, self.descriptors, self.verbose = task, descriptors, verbose
        self.output_dir = output_dir if output_dir is None or isinstance(output_dir, Path) \
            else Path(output_dir)
        self._options = dict(options)
        self._check_options(self.get_params())
        self._tmp: tempfile.TemporaryDirectory | None = None

    def _check_options(self, params: dict[str, Any]) -> None:
        """Raises ``SettingError`` naming the keyword whose value is refused."""
        options = {k: v for k, v in params.items() if k not in ("output_dir", "verbose")}
        names = _as_names(options.get("target_columns")) or ["y"]
        new_run({**options, "data": DATA_FILE, "target_columns": names}).validate()

    @property
    def options(self) -> dict[str, Any]:
        """``task``, ``descriptors`` and the options given (``target_columns`` a list)."""
        given = {k: v for k, v in self._options.items() if v is not None}
        if "target_columns" in given:
            given["target_columns"] = _as_names(given["target_columns"])
        return {"task": self.task, "descriptors": self.descriptors, **given}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"MoleculePredictor({shown})"

    def _run_config(self, data: str, names: list[str], **override: Any) -> RunConfig:
        return new_run({**self.options, "data": data, "target_columns": names, **override})

    @property
    def target_columns(self) -> list[str]:
        """The T target names (of ``y``'s columns, or the loaded run's)."""
        return list(self.meta.get("target_columns", []))

    def _new_run_dir(self) -> tuple[Path, tempfile.TemporaryDirectory | None]:
        """An empty run directory: ``output_dir``, or a new temporary one (returned too,
        to be kept for as long as its run is this object's)."""
        if self.output_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="setattn-")
            mark_run_dir(tmp.name)
            return Path(tmp.name), tmp
        check_run_dir(self.output_dir, "output_dir", extra=[DATA_FILE])
        if (self.output_dir / "config.json").is_file():
            raise ValueError(f"argument output_dir: {self.output_dir} already holds a run; "
                             f"choose another directory")
        mark_run_dir(self.output_dir)  # the run's first file, before its data.csv
        return self.output_dir, None

    def _names(self, num_targets: int) -> list[str]:
        names = self.options.get("target_columns")
        if names is None:
            return ["y"] if num_targets == 1 else [f"y{t}" for t in range(num_targets)]
        if len(names) != num_targets:
            raise ValueError(f"argument target_columns: {len(names)} name(s) for the "
                             f"{num_targets} column(s) of y")
        return list(names)

    def fit(self, smiles: Sequence[str], y: Any, *,
            val: tuple[Sequence[str], Any] | None = None) -> MoleculePredictor:
        """Train on M molecules, as ``setattn train`` on a CSV of them.

        Args:
            smiles: M SMILES strings (invalid ones are skipped and listed, or an error
                with ``strict=True``, as on the command line).
            y: (M,) or (M, T) targets, NaN where a label is missing.
            val: (SMILES, targets) of the validation set; the test part is then empty.
                Without it the configured ``split`` divides ``smiles``.

        Returns:
            ``self``, with ``models`` and ``metrics`` set.

        Raises:
            TypeError, ValueError: naming the argument, the row or the column of bad input.
        """
        smiles = _smiles_list(smiles, "smiles")
        targets = _targets(y, len(smiles), "y")  # (M, T)
        names = self._names(targets.shape[1])
        parts = None
        if val is not None:
            smiles, targets, parts = self._with_validation(smiles, targets, val)
        split_column = self.options.get("split_column") or "split"
        header = [self.options.get("smiles_column") or "smiles", *names]
        override = {}
        if parts is not None:
            header.append(split_column)
            override = {"split": "column", "split_column": split_column}
        if len(set(header)) < len(header):
            raise ValueError(f"argument target_columns: the column names {header} repeat")
        out, tmp = self._new_run_dir()  # a failed fit leaves the last run as it was
        _write_data(out / DATA_FILE, header, smiles, targets, parts)
        run = self._run_config(str((out / DATA_FILE).resolve()), names, **override)
        metrics = run_training(run, out, log=print if self.verbose else quiet)
        self.models_, self.meta_ = load_run(out, resolve_device(run.train.device))
        self.metrics_, self.run_dir_, self._tmp = metrics, out, tmp
        return self

    def _with_validation(self, smiles: list[str], targets: np.ndarray,
                         val: tuple[Sequence[str], Any]
                         ) -> tuple[list[str], np.ndarray, list[str]]:
        """The training and validation molecules in one table, with each row's part."""
        if not isinstance(val, tuple) or len(val) != 2:
            raise TypeError("argument val: expected a (smiles, y) pair")
        val_smiles = _smiles_list(val[0], "val[0]")
        val_targets = _targets(val[1], len(val_smiles), "val[1]")  # (M_val, T')
        if val_targets.shape[1] != targets.shape[1]:
            raise ValueError(f"argument val[1]: {val_targets.shape[1]} target column(s), "
                             f"y has {targets.shape[1]}")
        parts = ["train"] * len(smiles) + ["val"] * len(val_smiles)
        return smiles + val_smiles, np.concatenate([targets, val_targets]), parts

    def _check_fitted(self) -> None:
        """Raises scikit-learn's ``NotFittedError`` (a ValueError) before fit or load."""
        if not self.models:
            from sklearn.exceptions import NotFittedError  # only here: see estimator.py

            raise NotFittedError("MoleculePredictor: no model yet; call fit() or load() "
                                 "first")

    def _predict(self, smiles: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        self._check_fitted()
        smiles = _smiles_list(smiles, "smiles")
        mean, std, messages = predict_smiles(self.models, smiles)  # (M, T) each
        self._note(smiles, messages)
        return mean.numpy(), std.numpy()

    def _note(self, smiles: list[str], messages: list[str]) -> None:
        """Keep a prediction's per-SMILES errors and notes in ``errors`` and ``notes``."""
        self._errors = [(i, s, m.removeprefix("invalid SMILES: "))
                        for i, (s, m) in enumerate(zip(smiles, messages))
                        if m and not m.startswith("note: ")]
        self._notes = [(i, s, m.removeprefix("note: "))
                       for i, (s, m) in enumerate(zip(smiles, messages))
                       if m.startswith("note: ")]

    def predict(self, smiles: str | Sequence[str]) -> np.ndarray:
        """(M, T) float32 predictions: target units (regression) or probabilities; the
        ensemble's mean. A SMILES that does not parse gets a NaN row and an entry in
        ``errors``. The numbers are ``setattn predict``'s for the same run."""
        return self._predict(smiles)[0]

    def predict_std(self, smiles: str | Sequence[str]) -> np.ndarray:
        """(M, T) spread (standard deviation) of the ensemble members' predictions;
        zeros for a single model, NaN rows as in ``predict``."""
        return self._predict(smiles)[1]

    def predict_interval(self, smiles: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper ends, each (M, T), of the prediction intervals that a regression
        run calibrated on its validation part (``setattn.molprop.conformal``; 90 % by
        default): about 90 % of new molecules like the validation ones fall inside.
        NaN rows as in ``predict``.

        Raises:
            ValueError: for a classification model, or a run saved without a calibration.
        """
        calibration = self.meta.get("conformal") if self.meta else None
        if calibration is None:
            raise ValueError("MoleculePredictor.predict_interval: this run has no interval "
                             "calibration (classification, or saved before intervals existed)")
        self._check_fitted()
        smiles = _smiles_list(smiles, "smiles")
        _, lower, upper, messages = predict_interval(self.models, smiles, calibration)
        self._note(smiles, messages)
        return lower.numpy(), upper.numpy()

    def explain(self, smiles: str, method: str = DEFAULT_METHOD) -> np.ndarray:
        """(N,) each heavy atom's contribution to the prediction ``predict`` makes (the
        ensemble's, of the first target), by ``method`` (``setattn.molprop.explain``):
        what ``setattn explain`` draws.

        Raises:
            ValueError: if ``smiles`` does not parse.
        """
        self._check_fitted()
        if not isinstance(smiles, str):
            raise TypeError(f"argument smiles: explain takes one SMILES string, got "
                            f"{type(smiles).__name__}")
        e = explain_smiles(self.models, smiles, method)
        return e.attribution.values.numpy()  # (N,)

    def save(self, directory: str | Path) -> Path:
        """Copy the run directory to ``directory`` (``setattn predict --model`` reads it;
        ``setattn train --resume`` continues it). Returns the directory.

        Raises:
            ValueError: if ``directory`` is a file, already holds another run, or is a
                folder of other files (``run_files.check_run_dir``: nothing of the
                user's is replaced).
        """
        self._check_fitted()
        if self.run_dir is None:
            raise ValueError("save: loaded from a single checkpoint file, not a run directory")
        dest = Path(directory)
        if dest.exists() and not dest.is_dir():
            raise ValueError(f"argument directory: {dest} is a file, not a directory")
        if dest.resolve() == self.run_dir.resolve():
            return dest
        check_run_dir(dest, "directory", extra=[DATA_FILE])
        if (dest / "config.json").is_file():
            raise ValueError(f"argument directory: {dest} already holds a run")
        mark_run_dir(dest)
        shutil.copytree(self.run_dir, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(LOCK_NAME))
        config_path = dest / "config.json"
        run = RunConfig.from_dict(json.loads(config_path.read_text()), str(config_path))
        data = Path(run.data)
        if data.parent.resolve() == self.run_dir.resolve():  # fit's own CSV moves along
            run.data = str((dest / data.name).resolve())
            write_json(run.to_dict(), config_path)
        return dest

    @classmethod
    def load(cls, directory: str | Path, *, device: str = "auto",
             verbose: bool = True) -> MoleculePredictor:
        """The predictor of a run directory (``setattn train``'s or ``save``'s), or of
        one ``best.pt`` file, with its models on ``device``.

        Raises:
            FileNotFoundError, CheckpointError: naming what is missing or not ours.
        """
        path = Path(directory)
        models, meta = load_run(path, resolve_device(device), name="directory")
        options: dict[str, Any] = {"target_columns": meta["target_columns"]}
        descriptors = descriptor_set(models[0].config.descriptor_dim) or "none"
        if path.is_dir():
            config_path = path / "config.json"
            run = RunConfig.from_dict(json.loads(config_path.read_text()), str(config_path))
            options = {f.name: getattr(config_section(run, section), f.name)
                       for section, f in run_flags() if f.name not in _NOT_OPTIONS}
        predictor = cls(meta["task"], descriptors=descriptors, verbose=verbose,
                        **{**options, "device": device})
        predictor.models_, predictor.meta_ = models, meta
        predictor.run_dir_ = path if path.is_dir() else None
        metrics = path / "metrics.json"
        predictor.metrics_ = json.loads(metrics.read_text()) if metrics.is_file() else None
        return predictor
