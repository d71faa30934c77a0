"""The settings of a molecule run, each in one place: its default, its check and its flag.

``RunConfig`` is a whole ``setattn train`` run (saved as ``config.json``), holding a
``TrainConfig`` (how each network is trained) and a ``NetworkConfig`` (its
architecture, in ``setattn.molprop.network``). A field made with ``option`` is also a
command-line flag: ``setattn.cli`` builds the flag ``--name-with-dashes`` from the field,
its help text and its default, so adding a setting is one line here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from setattn.datasets.files import check_encoding
from setattn.molprop import splits
from setattn.molprop.device import DEVICE_HELP, PRECISIONS, resolve_device
from setattn.molprop.limits import KERNEL_MAX_TRAIN, MAX_HEAVY_ATOMS, RUN_BOUNDS
from setattn.molprop.network import NetworkConfig
from setattn.molprop.options import (
    Range,
    SettingError,
    check_ranges,
    config_from_dict,
    flag_fields,
    key_error,
    option,
)
from setattn.molprop.run_files import check_prediction_columns

__all__ = ["FORMAT", "KERNEL_MAX_TRAIN", "RunConfig", "TrainConfig",
           "legacy_batch_size"]

FORMAT = 1
"""Checkpoint and run format version, stored under the key ``"setattn_format"``."""

_LEGACY_MODEL_KEYS = ("kernel_size", "fingerprint_kernel", "fitted_blend")
"""Keys of a 0.2.0 ``config.json``'s model section that now belong to the kernel part."""

@dataclass
class TrainConfig:
    """How one model is trained.

    Attributes:
        epochs: maximum number of epochs (the OneCycle schedule spans them all).
        batch_size: molecules per batch; None (runs saved before it had a default)
            uses ``legacy_batch_size``.
        lr: peak learning rate of the OneCycle schedule (AdamW).
        weight_decay: AdamW weight decay.
        patience: stop after this many epochs without a better validation metric.
        seed: seeds the model's initialisation and the batch order (the run's
            ``--seed`` sets it).
        device: "auto", "cpu", "cuda" or "cuda:N" (``setattn.molprop.device``).
        precision: "fp32", or "bf16" for bfloat16 autocast of the training forward passes.
        compile: train through ``torch.compile(model, dynamic=True)`` (the same model and
            weights; validation and prediction stay eager).
    """

    epochs: int = option(60, "maximum number of epochs", type=int,
                         bounds=Range(1, largest=RUN_BOUNDS["epochs"]))
    batch_size: int | None = option(96, "molecules per batch", type=int,
                                    bounds=Range(1, largest=RUN_BOUNDS["batch_size"]))
    lr: float = option(1e-3, "peak learning rate (AdamW, OneCycle schedule)", type=float,
                       bounds=Range(0, low_open=True, finite=True))
    weight_decay: float = option(0.0, "AdamW weight decay", type=float,
                                 bounds=Range(0, finite=True))
    patience: int = option(20, "early stopping: epochs without a better validation metric",
                           type=int, bounds=Range(1))
    seed: int = 0
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")
    precision: str = option("fp32", "fp32, or bf16: bfloat16 autocast of the training forward "
                            "passes (weights and evaluation stay float32)", choices=PRECISIONS)
    compile: bool = option(False, "train through torch.compile: a one-off compile (about a "
                           "minute on a CPU, needs a C++ compiler there), then faster steps; "
                           "pays on large training sets", action="store_true")

    def validate(self) -> None:
        """Raises ValueError naming a setting out of range (``SettingError``: its
        keyword) or a device that is not there."""
        check_ranges(self)
        resolve_device(self.device)  # a clear error now if CUDA is asked for and absent
        if self.precision not in PRECISIONS:
            raise SettingError("precision", f"must be fp32 or bf16, got {self.precision!r}")


@dataclass
class RunConfig:
    """A whole ``setattn train`` run, saved as ``config.json`` (and read back on resume).

    Attributes:
        data: the CSV file.
        target_columns: names of its T target columns.
        smiles_column: name of its SMILES column.
        task: "regression" or "classification".
        split: "random", "scaffold", "kfold" or "column" (see ``setattn.molprop.splits``).
        split_column: the CSV column naming each row's part with ``split`` "column".
        split_sizes: (train, validation, test) fractions.
        seed: split seed; ensemble member k is seeded with ``seed + k``.
        fold: the test fold of a k-fold split.
        ensemble_size: K models trained on the same split.
        strict: refuse the data if a SMILES is invalid or empty (else skip it).
        kernel_ridge: "auto" blends a descriptor kernel ridge into regression and
            single-task classification models with descriptors (for classification its
            scores are fitted to the 0/1 labels and the two probabilities averaged),
            skipping it (with a printed note) above ``KERNEL_MAX_TRAIN`` training
            molecules or where its fit would not fit in memory; "on" refuses those runs
            before training, and also blends one into classification models with
            several tasks; "off".
        kernel_fingerprints: "on" stacks a kernel ridge on Morgan count fingerprints
            with the descriptor kernel ridge (``setattn.molprop.kernels``);
            "off" keeps the descriptor one alone.
        network_weight: "stacked" fits the network's weight in the blend of a regression
            model per task on the validation part (``setattn.molprop.ensemble``);
            "fixed", and every classification model, keep 0.5.
        max_heavy_atoms: molecules with more heavy atoms are skipped (or refused with
            ``strict``), like invalid SMILES.
        encoding: the CSV's text encoding (None: UTF-8, or UTF-16 with its BOM).
        train: training settings.
        model: model settings (``num_tasks`` and ``task`` follow the run).
    """

    data: str = option(None, "CSV file with a header line (.csv or .csv.gz)")
    target_columns: list[str] = option(None, "target column(s)", nargs="+", metavar="T")
    smiles_column: str = option("smiles", "SMILES column")
    task: str = option("regression", "regression, or classification (binary tasks, 0/1 "
                       "labels)", choices=["regression", "classification"])
    split: str = option("random", "how molecules are split (column: as --split-column says)",
                        choices=list(splits.SPLITS))
    split_column: str = option("split", "with --split column: the column naming each row's "
                               "part, train, val or test (the test part may be empty)")
    split_sizes: list[float] = option([0.8, 0.1, 0.1], "train, validation and test fractions",
                                      nargs=3, type=float, metavar=("TRAIN", "VAL", "TEST"))
    seed: int = option(0, "split seed; ensemble member k uses seed + k for its "
                       "initialisation and batch order", type=int, bounds=Range(0))
    fold: int = option(0, "test fold of --split kfold (round(1 / test fraction) folds)",
                       type=int)
    ensemble_size: int = option(3, "models trained on the same split", type=int,
                                bounds=Range(1, largest=RUN_BOUNDS["ensemble_size"]))
    strict: bool = option(False, "stop on an invalid or empty SMILES instead of skipping it",
                          action="store_true")
    kernel_ridge: str = option("auto", "average a kernel ridge regression on the descriptors "
                               "with the attention network's predictions (auto: for "
                               "regression and single-task classification with "
                               f"descriptors, up to {KERNEL_MAX_TRAIN} training "
                               "molecules and the memory its fit needs; on: refuse the "
                               "run where it cannot, and blend one into classification "
                               "with several tasks too)",
                               choices=["auto", "on", "off"])
    kernel_fingerprints: str = option("on", "stack a kernel ridge on Morgan count "
                                      "fingerprints with the descriptor kernel ridge, "
                                      "weighted by their leave-one-out errors (off: the "
                                      "descriptor kernel ridge alone)", choices=["on", "off"])
    network_weight: str = option("stacked", "the attention network's weight against the "
                                 "kernel ridge in regression: stacked (per task, fitted on "
                                 "the validation part and shrunk toward 0.5 by its standard "
                                 "error) or fixed (0.5, as classification always has)",
                                 choices=["stacked", "fixed"])
    max_heavy_atoms: int = option(MAX_HEAVY_ATOMS, "skip (with --strict: refuse) molecules "
                                  "with more heavy atoms, as invalid SMILES are", type=int,
                                  bounds=Range(1, largest=RUN_BOUNDS["max_heavy_atoms"]))
    encoding: str | None = option(None, "text encoding of the CSV, e.g. latin-1 or cp1252 "
                                  "(default: UTF-8, or UTF-16 with its byte-order mark)")
    train: TrainConfig = field(default_factory=TrainConfig)
    model: NetworkConfig = field(default_factory=NetworkConfig)

    def validate(self) -> None:
        """Raises ValueError naming a setting that is missing, out of range (a
        ``SettingError``, naming its keyword) or at odds with another."""
        if not self.data:
            raise SettingError("data", "is required (unless a run is resumed)")
        if not self.target_columns:
            raise SettingError("target_columns", "is required (unless a run is resumed): "
                               "give at least one target column", colon=True)
        twice = sorted({c for c in self.target_columns if self.target_columns.count(c) > 1})
        if twice:
            raise SettingError("target_columns", f"{twice} given more than once", colon=True)
        if self.smiles_column in self.target_columns:
            raise SettingError("target_columns", f"{self.smiles_column!r} is the SMILES "
                               f"column", colon=True)
        check_prediction_columns(self.smiles_column, self.target_columns)
        if self.task not in ("regression", "classification"):
            raise SettingError("task", f"must be regression or classification, got "
                               f"{self.task!r}")
        if self.split not in splits.SPLITS:
            raise SettingError("split", f"must be one of {list(splits.SPLITS)}, got "
                               f"{self.split!r}")
        splits.check_sizes(self.split_sizes)
        check_ranges(self)
        if self.kernel_ridge not in ("auto", "on", "off"):
            raise SettingError("kernel_ridge", f"must be auto, on or off, got "
                               f"{self.kernel_ridge!r}")
        if self.kernel_fingerprints not in ("on", "off"):
            raise SettingError("kernel_fingerprints", f"must be on or off, got "
                               f"{self.kernel_fingerprints!r}")
        if self.network_weight not in ("stacked", "fixed"):
            raise SettingError("network_weight", f"must be stacked or fixed, got "
                               f"{self.network_weight!r}")
        if self.kernel_ridge == "on" and not self.model.descriptor_dim:
            raise SettingError("kernel_ridge", "on needs descriptors (it regresses on them), "
                               "not descriptors none", colon=True)
        check_encoding(self.encoding)
        self.train.validate()
        self.model.validate()

    def to_dict(self) -> dict:
        """The JSON form of ``config.json``, with the format marker."""
        d = asdict(self)
        d["model"] = self.model.to_dict()
        return {"setattn_format": FORMAT, **d}

    @classmethod
    def from_dict(cls, d: dict, source: str = "config.json") -> RunConfig:
        """The run of a ``config.json`` dict, checked: other formats, unknown keys,
        values of the wrong type or out of range are refused naming the key."""
        if not isinstance(d, dict):
            raise ValueError(f"{source}: not a setattn run configuration (a JSON "
                             f"{type(d).__name__}, expected an object)")
        if d.get("setattn_format") != FORMAT:
            raise ValueError(f"{source}: not a setattn run configuration "
                             f"(setattn_format {d.get('setattn_format')!r}, expected {FORMAT})")
        top = {k: v for k, v in d.items() if k not in ("setattn_format", "train", "model")}
        run = config_from_dict(cls, top, source)
        run.train = config_from_dict(TrainConfig, d.get("train", {}), source, "train.")
        # a 0.2.0 run's model section also named its kernel part (always 0 there)
        model = {k: v for k, v in d.get("model", {}).items() if k not in _LEGACY_MODEL_KEYS} \
            if isinstance(d.get("model", {}), dict) else d.get("model")
        run.model = NetworkConfig.from_dict(model, source, "model.")
        try:
            run.validate()
        except ValueError as err:
            raise key_error(err, source, _SECTIONS) from None
        return run

    @classmethod
    def read(cls, path: str | Path) -> RunConfig:
        """The run of a ``config.json`` file (``from_dict``); a file that is not JSON
        is refused naming it, without quoting it."""
        path = Path(path)
        try:
            d = json.loads(path.read_bytes())
        except (ValueError, UnicodeError) as err:
            reason = f"line {err.lineno}" if isinstance(err, json.JSONDecodeError) else "binary"
            raise ValueError(f"{path}: not a setattn run configuration (not valid JSON: "
                             f"{reason})") from None
        return cls.from_dict(d, str(path))


def legacy_batch_size(n_train: int) -> int:
    """The batch size of runs saved with ``batch_size`` None (before it had a default):
    32 molecules below 2000 training molecules, else 64. ``--resume`` keeps it for them."""
    return 32 if n_train < 2000 else 64


_SECTIONS = {**{f.name: "train." for f in flag_fields(TrainConfig)},
             **{f.name: "model." for f in flag_fields(NetworkConfig)}}
"""The section of ``config.json`` holding each train and model flag's key."""
