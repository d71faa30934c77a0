"""``MoleculePredictor``: molecule property prediction from Python, ``fit`` / ``predict``.

    model = MoleculePredictor(epochs=30, seed=0)
    model.fit(smiles, y)                  # SMILES or RDKit Mols; y: (M,) or (M, T), NaN = missing
    p = model.predict(new_smiles)         # (M', T); NaN rows and model.errors for bad SMILES
    model.save("runs/sol")                # a run directory, as ``setattn train`` writes

Every ``fit`` is a ``setattn train`` run: it writes the SMILES and targets as a CSV into
the run directory and calls the same ``run_training`` with the ``RunConfig`` that the
same options give on the command line (``setattn.molprop.config.new_run``), so the
same data, options and seed give the same models and the same ``metrics.json``.
``load`` reads any run directory, the command line's included, and ``setattn predict
--model DIR`` reads any that ``save`` wrote. The predictor is a scikit-learn estimator
(``get_params`` / ``set_params``, ``score``; ``clone``, ``Pipeline``, ``GridSearchCV``):
:mod:`setattn.molprop.api` says how.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rdkit import Chem

from setattn.chem.descriptors import descriptor_set
from setattn.files import atomic_open, write_json
from setattn.molprop.checkpoint import LOCK_NAME, check_run_dir, load_run, mark_run_dir
from setattn.molprop.config import (
    RunConfig,
    config_section,
    new_run,
    option_names,
    resolve_device,
    run_flags,
)
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.explain import DEFAULT_METHOD, explain_smiles
from setattn.molprop.loop import quiet
from setattn.molprop.predict import embed_smiles, predict_interval, predict_smiles
from setattn.molprop.run import run_training

__all__ = ["DATA_FILE", "OWN_PARAMS", "EstimatorConventions", "MoleculePredictor", "as_smiles"]


OWN_PARAMS = ("task", "descriptors", "output_dir", "verbose")
"""The predictor's keywords that are not ``setattn train`` options passed through."""


NOT_OPTIONS = ("data", "task", "descriptors")
"""Options that ``fit`` sets, or that are keywords of their own."""


DATA_FILE = "data.csv"
"""The CSV that ``fit`` writes into the run directory (the run's ``--data``)."""


def _one_smiles(item: Any, name: str, i: int) -> str:
    """A SMILES string, or a ``Mol`` written as SMILES in its own atom order (so that
    it is featurised with the same atoms in the same order)."""
    if isinstance(item, str):
        return item
    if isinstance(item, Chem.Mol):
        return Chem.MolToSmiles(item, canonical=False)
    raise TypeError(f"argument {name}: item {i} is {type(item).__name__} {item!r}, not a "
                    f"SMILES string or an RDKit Mol")


def as_smiles(items: Any, name: str) -> list[str]:
    """Molecules as a list of SMILES strings.

    Args:
        items: one SMILES string or ``Mol``; or a sequence of them: a list, a pandas
            Series or one-column DataFrame, a NumPy array of shape (M,) or (M, 1).
        name: the argument, for messages.

    Raises:
        TypeError: naming ``name`` and the first item that is neither a string nor a
            ``Mol``, or an input that is not a sequence of molecules.
    """
    if isinstance(items, str | Chem.Mol):
        return [_one_smiles(items, name, 0)]
    if isinstance(items, Mapping):
        raise TypeError(f"argument {name}: a {type(items).__name__} is not a list of SMILES "
                        f"(its keys would be read as the molecules); pass list(d.values()) "
                        f"or list(d)")
    if hasattr(items, "to_numpy"):  # pandas: a Series, or a DataFrame of one column
        items = items.to_numpy()
    if isinstance(items, np.ndarray):
        if items.ndim == 2 and items.shape[1] == 1:
            items = items[:, 0]
        if items.ndim != 1:
            raise TypeError(f"argument {name}: expected molecules of shape (M,) or (M, 1), "
                            f"got an array of shape {items.shape}")
    if not isinstance(items, Iterable):
        raise TypeError(f"argument {name}: a SMILES string, an RDKit Mol or a sequence of "
                        f"them, got {type(items).__name__}")
    return [_one_smiles(item, name, i) for i, item in enumerate(items)]


def _scored(y: np.ndarray, p: np.ndarray, score_task) -> float:
    """The mean over target columns of ``score_task(y_t, p_t)``, each on the rows where
    both the label and the prediction are numbers (NaN is a missing label or a molecule
    that did not parse)."""
    values = []
    for t in range(y.shape[1]):
        keep = np.isfinite(y[:, t]) & np.isfinite(p[:, t])
        values.append(score_task(y[keep, t], p[keep, t]))
    return float(np.mean(values))


class EstimatorConventions:
    """scikit-learn's estimator conventions (see the module docstring).

    The class using it takes every keyword of ``param_names()`` in ``__init__``, stores
    each as the attribute of its name, unchecked, and defines ``predict``.
    """

    @staticmethod
    def option_keywords() -> list[str]:
        """The ``setattn train`` options ``__init__`` accepts as keywords."""
        return [n for n in option_names() if n not in NOT_OPTIONS]

    @classmethod
    def param_names(cls) -> list[str]:
        """Every keyword of ``__init__``: ``OWN_PARAMS`` and the options."""
        return [*OWN_PARAMS, *cls.option_keywords()]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Every keyword of ``__init__`` and its value (None: the option's default)."""
        return {name: getattr(self, name) for name in self.param_names()}

    def set_params(self, **params: Any):
        """Set keywords as ``__init__`` takes them (checked by ``fit``, as there).
        Returns ``self``.

        Raises:
            ValueError: for a keyword that is not one (scikit-learn's convention).
        """
        allowed = self.param_names()
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ValueError(f"{type(self).__name__}.set_params: unknown keyword(s) "
                             f"{unknown}; keywords: {sorted(allowed)}")
        for name, value in params.items():
            setattr(self, name, value)
        return self

    @property
    def _estimator_type(self) -> str:
        """"classifier" or "regressor", following ``task``."""
        return "classifier" if self.task == "classification" else "regressor"

    def __sklearn_tags__(self):
        """scikit-learn's tags: a regressor or a classifier of molecules (strings or
        ``Mol`` objects, not numeric arrays), which needs ``y`` to fit; ``transform``
        gives float32 molecule vectors whatever the input."""
        from sklearn.utils import (
            ClassifierTags,
            InputTags,
            RegressorTags,
            Tags,
            TargetTags,
            TransformerTags,
        )

        classifier = self._estimator_type == "classifier"
        return Tags(estimator_type=self._estimator_type,
                    target_tags=TargetTags(required=True, single_output=False,
                                           multi_output=True),
                    transformer_tags=TransformerTags(preserves_dtype=[]),
                    classifier_tags=ClassifierTags() if classifier else None,
                    regressor_tags=None if classifier else RegressorTags(),
                    input_tags=InputTags(one_d_array=True, two_d_array=False, string=True))

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """R2 of the predictions for regression, ROC-AUC of the predicted probabilities
        for classification; the mean over target columns, NaN labels and molecules that
        do not parse left out.

        Args:
            X: M molecules (see ``as_smiles``).
            y: (M,) or (M, T) targets.
            sample_weight: not supported (None).
        """
        if sample_weight is not None:
            raise TypeError("score: sample_weight is not supported")
        p = np.asarray(self.predict(X), dtype=np.float64)  # (M, T)
        y = _targets(y, p.shape[0], "y")  # (M, T)
        if y.shape[1] != p.shape[1]:
            raise ValueError(f"argument y: {y.shape[1]} target column(s), the model "
                             f"predicts {p.shape[1]}")
        if self._estimator_type == "classifier":
            from setattn.molprop.metrics import roc_auc

            return _scored(y, p, roc_auc)
        from sklearn.metrics import r2_score

        return _scored(y, p, lambda yt, pt: float(r2_score(yt, pt)))

    # fitted attributes, also under the names they had before scikit-learn's convention
    @property
    def ensemble(self) -> Ensemble | None:
        """``ensemble_``: the trained (or loaded) ensemble, in eval mode (None before)."""
        return getattr(self, "ensemble_", None)

    @property
    def metrics(self) -> dict | None:
        """``metrics_``: ``metrics.json`` of the run (None if there is none)."""
        return getattr(self, "metrics_", None)

    @property
    def meta(self) -> dict:
        """``meta_``: the run's checkpoint metadata ({} before fitting)."""
        return getattr(self, "meta_", {})

    @property
    def run_dir(self) -> Path | None:
        """``run_dir_``: the run directory the models come from."""
        return getattr(self, "run_dir_", None)

    @property
    def errors(self) -> list[tuple[int, str, str]]:
        """(index, SMILES, reason) of each SMILES the last prediction could not parse."""
        return getattr(self, "_errors", [])

    @property
    def notes(self) -> list[tuple[int, str, str]]:
        """(index, SMILES, note) of each SMILES predicted with a remark."""
        return getattr(self, "_notes", [])


def _targets(y: Any, rows: int, name: str) -> np.ndarray:
    """``y`` as a float64 (M, T) array of ``rows`` rows; NaN is a missing label.

    Raises:
        ValueError: naming ``name`` for a shape that does not fit, a value that is not a
            number, or one that is infinite or beyond float32.
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
    bad = np.argwhere(np.abs(arr) > np.finfo(np.float32).max)  # inf included, NaN not
    if bad.size:
        row, col = bad[0]
        raise ValueError(f"argument {name}: row {row}, column {col}: {arr[row, col]} is not "
                         f"a finite number within float32 (use NaN for a missing label)")
    return arr


def _check_labelled(arr: np.ndarray, name: str, per_column: bool) -> None:
    """Raises a ValueError naming ``name`` when the (M, T) targets hold no label at all
    (``per_column``: when one of their columns holds none)."""
    unlabelled = np.isnan(arr).all(0)  # (T,)
    if unlabelled.all():
        raise ValueError(f"argument {name}: every value is NaN, so there is no label")
    if per_column and unlabelled.any():
        raise ValueError(f"argument {name}: every value of column "
                         f"{np.flatnonzero(unlabelled)[0]} is NaN, so it has no label")


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
        target_columns ... max_hops: every ``setattn train`` flag, named like it
            (``--batch-size`` is ``batch_size``): ``target_columns`` names the columns
            of ``y``; ``device`` is "auto", "cpu" or "cuda[:N]". None, the default of
            each, is the command line's default. The keywords are stored as given and
            checked by ``fit`` (or ``check``), as scikit-learn's estimators do.

    Attributes:
        ensemble_: the trained (or loaded) ``Ensemble``, in eval mode (also ``ensemble``).
        metrics_: ``metrics.json`` of the run, None if there is none (also ``metrics``).
        meta_: the checkpoint's metadata, ``target_columns`` the names of the T
            targets among it (also ``meta``).
        run_dir_: the run directory the models come from (also ``run_dir``).
        errors: (index, SMILES, reason) of each SMILES the last ``predict`` or
            ``predict_std`` could not parse or skipped (NaN rows).
        notes: (index, SMILES, note) of each SMILES predicted with a remark (a salt
            or mixture: its largest fragment was predicted; isotopes stripped; dummy
            atoms or elements the model has not seen: ``setattn.domains.atom_notes``).
    """

    def __init__(self, task: str = "regression", *, descriptors: str = "rdkit",
                 output_dir: str | Path | None = None, verbose: bool = True,
                 target_columns: str | Sequence[str] | None = None,
                 smiles_column: str | None = None, split: str | None = None,
                 split_column: str | None = None, split_sizes: Sequence[float] | None = None,
                 seed: int | None = None, fold: int | None = None,
                 ensemble_size: int | None = None, members: str | None = None,
                 strict: bool | None = None,
                 kernel_ridge: str | None = None, kernel_fingerprints: str | None = None,
                 kernel_vectors: str | None = None, network_weight: str | None = None,
                 pretrained: str | None = None, max_heavy_atoms: int | None = None,
                 encoding: str | None = None, epochs: int | None = None,
                 batch_size: int | None = None, lr: float | None = None,
                 weight_decay: float | None = None, patience: int | None = None,
                 device: str | None = None, precision: str | None = None,
                 compile: bool | None = None, freeze_epochs: int | None = None,
                 encoder_lr: float | None = None,
                 hidden: int | None = None,
                 layers: int | None = None, heads: int | None = None, conv: str | None = None,
                 dropout: float | None = None, global_layers: int | None = None,
                 max_hops: int | None = None) -> None:
        # every keyword stored as given and checked by ``fit`` (scikit-learn's
        # convention: ``clone`` and ``set_params`` rebuild and set them)
        self.task, self.descriptors, self.output_dir, self.verbose = (
            task, descriptors, output_dir, verbose)
        self.target_columns, self.smiles_column, self.split = target_columns, smiles_column, split
        self.split_column, self.split_sizes, self.seed, self.fold = (
            split_column, split_sizes, seed, fold)
        self.ensemble_size, self.strict, self.kernel_ridge = ensemble_size, strict, kernel_ridge
        self.members = members
        self.kernel_fingerprints, self.network_weight = kernel_fingerprints, network_weight
        self.kernel_vectors = kernel_vectors
        self.pretrained, self.freeze_epochs = pretrained, freeze_epochs
        self.encoder_lr = encoder_lr
        self.max_heavy_atoms, self.encoding, self.epochs = max_heavy_atoms, encoding, epochs
        self.batch_size, self.lr, self.weight_decay = batch_size, lr, weight_decay
        self.patience, self.device, self.precision = patience, device, precision
        self.compile, self.hidden, self.layers, self.heads = compile, hidden, layers, heads
        self.conv, self.dropout, self.global_layers, self.max_hops = (
            conv, dropout, global_layers, max_hops)
        self._tmp: tempfile.TemporaryDirectory | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps: every attribute, and where the run directory is this
        object's temporary one (gone once this object is), its files, so that a copy
        in another process still saves and explains."""
        state = dict(self.__dict__)
        tmp = state.pop("_tmp", None)
        if tmp is not None and self.run_dir is not None:
            root = Path(self.run_dir)
            state["_run_files"] = {str(f.relative_to(root)): f.read_bytes()
                                   for f in sorted(root.rglob("*")) if f.is_file()}
            state["run_dir_"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A pickled predictor's attributes; its run directory, where it carried one,
        written into a new temporary directory of this object's."""
        files = state.pop("_run_files", None)
        self.__dict__.update(state)
        self._tmp = None
        if files is not None:
            self._tmp = tempfile.TemporaryDirectory(prefix="setattn-")
            root = Path(self._tmp.name)
            for name, content in files.items():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_bytes(content)
            self.run_dir_ = root

    def check(self) -> None:
        """Check every keyword as ``fit`` does, before it trains.

        Raises:
            TypeError: naming the option whose value is not of its type.
            ValueError: naming the option whose value is out of range (CUDA asked for
                where there is none included); a ``SettingError``.
        """
        names = _as_names(self.target_columns) or ["y"]
        self._run_config(DATA_FILE, names).validate()

    @property
    def options(self) -> dict[str, Any]:
        """``task``, ``descriptors`` and the options given (``target_columns`` a list)."""
        given = {name: getattr(self, name) for name in self.option_keywords()
                 if getattr(self, name) is not None}
        if "target_columns" in given:
            given["target_columns"] = _as_names(given["target_columns"])
        return {"task": self.task, "descriptors": self.descriptors, **given}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"MoleculePredictor({shown})"

    def _run_config(self, data: str, names: list[str], **override: Any) -> RunConfig:
        return new_run({**self.options, "data": data, "target_columns": names, **override})

    def _new_run_dir(self) -> tuple[Path, tempfile.TemporaryDirectory | None]:
        """An empty run directory: ``output_dir``, or a new temporary one (returned too,
        to be kept for as long as its run is this object's)."""
        if self.output_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="setattn-")
            mark_run_dir(tmp.name)
            return Path(tmp.name), tmp
        out = Path(self.output_dir)
        check_run_dir(out, "output_dir", extra=[DATA_FILE])
        if (out / "config.json").is_file():
            raise ValueError(f"argument output_dir: {out} already holds a run; "
                             f"choose another directory")
        mark_run_dir(out)  # the run's first file, before its data.csv
        return out, None

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
            ``self``, with ``ensemble`` and ``metrics`` set.

        Raises:
            TypeError, ValueError: naming the argument, the row or the column of bad input.
        """
        self.check()
        smiles = as_smiles(smiles, "smiles")
        if not smiles:
            raise ValueError("argument smiles: no molecule to train on")
        targets = _targets(y, len(smiles), "y")  # (M, T)
        _check_labelled(targets, "y", per_column=True)
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
        self.ensemble_, self.meta_ = load_run(out, resolve_device(run.train.device))
        self.metrics_, self.run_dir_, self._tmp = metrics, out, tmp
        return self

    def _with_validation(self, smiles: list[str], targets: np.ndarray,
                         val: tuple[Sequence[str], Any]
                         ) -> tuple[list[str], np.ndarray, list[str]]:
        """The training and validation molecules in one table, with each row's part."""
        if not isinstance(val, tuple) or len(val) != 2:
            raise TypeError("argument val: expected a (smiles, y) pair")
        val_smiles = as_smiles(val[0], "val[0]")
        val_targets = _targets(val[1], len(val_smiles), "val[1]")  # (M_val, T')
        _check_labelled(val_targets, "val[1]", per_column=False)
        if val_targets.shape[1] != targets.shape[1]:
            raise ValueError(f"argument val[1]: {val_targets.shape[1]} target column(s), "
                             f"y has {targets.shape[1]}")
        parts = ["train"] * len(smiles) + ["val"] * len(val_smiles)
        return smiles + val_smiles, np.concatenate([targets, val_targets]), parts

    def _check_fitted(self) -> None:
        """Raises scikit-learn's ``NotFittedError`` (a ValueError) before fit or load."""
        if not self.ensemble:
            from sklearn.exceptions import NotFittedError  # only here: see estimator.py

            raise NotFittedError("MoleculePredictor: no model yet; call fit() or load() "
                                 "first")

    def _predict(self, smiles: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        self._check_fitted()
        smiles = as_smiles(smiles, "smiles")
        mean, std, messages = predict_smiles(self.ensemble, smiles)  # (M, T) each
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

    def transform(self, smiles: str | Sequence[str], member: int | None = None) -> np.ndarray:
        """(M, K * 2 D) float32 molecule vectors: what each of the K networks reads a
        molecule into (``MoleculeNetwork.encode``: its attention readout and the sum of
        its atoms' states), members side by side (``member``: one member's, (M, 2 D));
        for models of one's own. NaN rows and ``errors`` as in ``predict``. The numbers
        are ``setattn embed``'s for the same run.

        Raises:
            ValueError: if ``member`` is not one of the ensemble's members.
        """
        self._check_fitted()
        smiles = as_smiles(smiles, "smiles")
        vectors, messages = embed_smiles(self.ensemble, smiles, member)
        self._note(smiles, messages)
        return vectors.numpy()

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
        smiles = as_smiles(smiles, "smiles")
        _, lower, upper, messages = predict_interval(self.ensemble, smiles, calibration)
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
        e = explain_smiles(self.ensemble, smiles, method)
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
        ensemble, meta = load_run(path, resolve_device(device), name="directory")
        options: dict[str, Any] = {"target_columns": meta["target_columns"]}
        descriptors = descriptor_set(ensemble.descriptor_dim) or "none"
        if path.is_dir():
            config_path = path / "config.json"
            run = RunConfig.from_dict(json.loads(config_path.read_text()), str(config_path))
            options = {f.name: getattr(config_section(run, section), f.name)
                       for section, f in run_flags() if f.name not in NOT_OPTIONS}
        predictor = cls(meta["task"], descriptors=descriptors, verbose=verbose,
                        **{**options, "device": device})
        predictor.ensemble_, predictor.meta_ = ensemble, meta
        predictor.run_dir_ = path if path.is_dir() else None
        metrics = path / "metrics.json"
        predictor.metrics_ = json.loads(metrics.read_text()) if metrics.is_file() else None
        return predictor
