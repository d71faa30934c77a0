"""The settings of a molecule run, each in one place: its default, its check and its flag.

``RunConfig`` is a whole ``setattn train`` run (saved as ``config.json``), holding a
``TrainConfig`` (how each network is trained) and a ``NetworkConfig`` (the attention
network's architecture, ``setattn.molprop.network`` builds it). A field made with
``option`` is also a command-line flag: ``setattn.cli`` builds the flag
``--name-with-dashes`` from the field, its help text, its default and its choices, so
adding a setting is one line here. A field made with ``bounded`` has a range but no flag.

- **checks**: ``range_error`` is the one check of a value against its ``Range``; a
  config's ``validate`` calls it through ``check_ranges`` (the error names the keyword:
  ``epochs must be >= 1, got -1``), and the command line on each flag's value as
  argparse reads it (the error names the flag: ``argument --epochs: must be >= 1, got
  -1``). ``config_from_dict`` reads a JSON dict, every key and type checked.
- **bounds**: ``MAX_HEAVY_ATOMS`` and ``FEATURIZE_SECONDS`` (molecules above the size
  limit, or whose featurisation runs past the time budget, are skipped like invalid
  SMILES), ``MODEL_BOUNDS`` and ``RUN_BOUNDS`` (the largest sizes accepted from flags,
  files and checkpoints, checked before anything is allocated), ``KERNEL_MAX_TRAIN``.
- **devices**: ``resolve_device`` turns ``auto`` / ``cpu`` / ``cuda[:N]`` into a device,
  or a clear error where CUDA is asked for and absent.
- **options**: ``new_run`` maps the keywords of ``MoleculePredictor`` (named like the
  flags, plus ``descriptors``) to a ``RunConfig``; ``run_flags`` lists them.

The memory a run needs (and whether the kernel part fits) is estimated where the run is
made, in ``setattn.molprop.run``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import Field, asdict, dataclass, field, fields
from numbers import Integral, Real
from pathlib import Path
from typing import Any, TypeVar

import dacite
import torch

from setattn.chem.descriptors import descriptor_count
from setattn.datasets.files import check_encoding
from setattn.domains.molecules import ATOM_FEATURE_DIM, BOND_FEATURE_DIM

__all__ = ["DEFAULT_DESCRIPTORS", "DESCRIPTORS", "DEVICE_HELP", "FEATURIZE_SECONDS", "FORMAT",
           "KERNEL_MAX_TRAIN", "MAX_HEAVY_ATOMS", "MODEL_BOUNDS", "PRECISIONS", "RUN_BOUNDS",
           "SPLITS", "Range", "RunConfig", "SettingError", "TrainConfig", "bounded",
           "check_device", "check_prediction_columns", "check_ranges", "check_sizes",
           "config_from_dict", "config_section", "flag_fields", "key_error", "legacy_batch_size",
           "lr_option", "new_run", "option", "option_names", "prediction_columns", "range_error",
           "resolve_device", "run_flags", "weight_decay_option"]


T = TypeVar("T")


@dataclass(frozen=True)
class Range:
    """The values a numeric setting accepts (None, "not set", is always accepted).

    Attributes:
        low: the smallest value (None: no lower end).
        low_open: the value must be above ``low``, not equal to it.
        below: the value must be under this (None: no upper end).
        finite: the value must be finite.
        largest: the largest value setattn accepts, a size it can hold
            (``setattn.molprop.config``); None: no such limit.
    """

    low: float | None = None
    low_open: bool = False
    below: float | None = None
    finite: bool = False
    largest: int | None = None

    def text(self) -> str:
        """The condition in words, largest value aside: ``>= 0 and < 1``."""
        parts = [] if self.low is None else [f"{'>' if self.low_open else '>='} {self.low:g}"]
        parts += [] if self.below is None else [f"< {self.below:g}"]
        return " and ".join(parts + (["finite"] if self.finite else []))


class SettingError(ValueError):
    """A setting's value refused: out of its ``Range``, not one of its choices, or at odds
    with another setting. The message names the keyword (``epochs must be >= 1, got 0``);
    the command line names the flag instead (``argument --epochs: must be >= 1, got 0``),
    a settings file the key.

    Attributes:
        name: the setting (the field's name, ``batch_size``).
        reason: what is wrong with its value, ``must be >= 1, got 0``.
    """

    def __init__(self, name: str, reason: str, *, colon: bool = False) -> None:
        """``colon``: the reason is a clause of its own (``device: cuda asked for, but
        ...``) rather than the rest of a sentence about ``name``."""
        super().__init__(f"{name}{':' if colon else ''} {reason}")
        self.name, self.reason = name, reason


def range_error(value: Any, allowed: Range) -> str | None:
    """Why ``value`` is outside ``allowed`` (``must be >= 1, got 0``), or None if it is
    inside (or None). NaN is inside no range that has a lower end, an upper end or
    ``finite``."""
    if value is None or isinstance(value, bool):
        return None
    if allowed.largest is not None and value > allowed.largest:
        return f"must be <= {allowed.largest:,} (the largest setattn accepts), got {value}"
    low_ok = allowed.low is None or (value > allowed.low if allowed.low_open
                                     else value >= allowed.low)
    below_ok = allowed.below is None or value < allowed.below
    if low_ok and below_ok and (not allowed.finite or math.isfinite(value)):
        return None
    return f"must be {allowed.text()}, got {value}"


def check_ranges(config: Any) -> None:
    """Check every field of the dataclass instance ``config`` that has a ``Range``.

    Raises:
        SettingError: naming the first field outside its range.
    """
    for f in fields(config):
        allowed = f.metadata.get("range")
        reason = None if allowed is None else range_error(getattr(config, f.name), allowed)
        if reason is not None:
            raise SettingError(f.name, reason)


def option(default: Any, help: str, *, bounds: Range | None = None,
           show_default: bool = True, group: str | None = None, **flag: Any) -> Any:
    """A dataclass field that is also a command-line flag.

    Args:
        default: the default value (a list default is copied for every instance).
        help: the flag's help text; the CLI appends ``(default: ...)`` to it unless
            ``show_default`` is False (a help text that says the default its own way).
        bounds: the values it accepts (``check_ranges``), if it is a number.
        group: fields of one command naming the same group are a required choice of
            exactly one of their flags (``setattn explain --smiles | --data``).
        **flag: further ``argparse.add_argument`` settings (``type``, ``nargs``,
            ``choices``, ``metavar``, ``action``, ``required``).
    """
    metadata = {"help": help, "flag": flag, "range": bounds, "show_default": show_default,
                "group": group}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def bounded(default: Any, bounds: Range) -> Any:
    """A dataclass field that is no flag but accepts only the values of ``bounds``."""
    return field(default=default, metadata={"range": bounds})


def lr_option() -> Any:
    """``--lr`` of a run's training and of ``setattn pretrain``."""
    return option(1e-3, "peak learning rate (AdamW, OneCycle schedule)", type=float,
                  bounds=Range(0, low_open=True, finite=True))


def weight_decay_option() -> Any:
    """``--weight-decay`` of a run's training and of ``setattn pretrain``."""
    return option(0.0, "AdamW weight decay", type=float, bounds=Range(0, finite=True))


def flag_fields(config: type) -> list[Field]:
    """The fields of a config dataclass that are command-line flags, in order."""
    return [f for f in fields(config) if "help" in f.metadata]


def _float_from_int(value: Any) -> Any:
    """JSON writes 1.0 as 1: an integer is a float where a float is expected."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def config_from_dict(config: type[T], d: Any, source: str, prefix: str = "") -> T:
    """A config dataclass from a JSON dict, every key and type checked (``dacite``).

    Args:
        config: the dataclass.
        d: the parsed JSON value.
        source: the file it came from, for messages.
        prefix: the key of ``d`` in an enclosing dict ("model."), for messages.

    Raises:
        ValueError: ``source`` and the key (with its section) that is unknown or has
            the wrong type, in one line.
    """
    if not isinstance(d, dict):
        where = f"key {prefix[:-1]!r}" if prefix else "the file"
        raise ValueError(f"{source}: {where} holds a JSON {type(d).__name__}, not an object "
                         f"of settings")
    known = {f.name for f in fields(config)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {[prefix + k for k in unknown]}")
    settings = dacite.Config(strict=True, type_hooks={float: _float_from_int})
    try:
        return dacite.from_dict(config, d, settings)
    except dacite.WrongTypeError as err:
        path = prefix + (err.field_path or "")
        raise ValueError(f"{source}: key {path!r}: {_shown(err.value)} is not of type "
                         f"{getattr(err.field_type, '__name__', err.field_type)}") from None
    except dacite.DaciteError as err:
        raise ValueError(f"{source}: {prefix}{err}") from None


_FLAG = re.compile(r"argument --([a-z][a-z-]*): ")


def key_error(err: ValueError, source: str, sections: dict[str, str]) -> ValueError:
    """A setting's check failure (a ``SettingError``, or ``argument --flag: ...``)
    reworded for a file: the setting becomes its key there, ``sections`` giving the key's
    section (``"train."``)."""
    if isinstance(err, SettingError):
        return ValueError(f"{source}: key {sections.get(err.name, '') + err.name!r}: "
                          f"{err.reason}")
    text = str(err)
    match = _FLAG.match(text)
    if match is None:
        return ValueError(f"{source}: {text}")
    name = match.group(1).replace("-", "_")
    return ValueError(f"{source}: key {sections.get(name, '') + name!r}: {text[match.end():]}")


FORMAT = 1
"""Checkpoint and run format version, stored under the key ``"setattn_format"``."""


_LEGACY_MODEL_KEYS = ("kernel_size", "fingerprint_kernel", "fitted_blend")
"""Keys of a 0.2.0 ``config.json``'s model section that now belong to the kernel part."""


MAX_HEAVY_ATOMS = 300
"""Default ``--max-heavy-atoms``: molecules with more heavy atoms are skipped."""


FEATURIZE_SECONDS = 30.0
"""Time budget per molecule for its featurisation (checked between descriptors): a
300-atom chain, the slowest molecule the default size limit lets through, takes about
7 s on one core."""


MODEL_BOUNDS = {"hidden": 8192, "heads": 1024, "layers": 64, "num_tasks": 100_000,
                "descriptor_dim": 100_000, "atom_dim": 4096, "bond_dim": 1024,
                "kernel_size": 100_000, "max_hops": 1024}
"""The largest value of each size of a ``NetworkConfig``."""


RUN_BOUNDS = {"ensemble_size": 1000, "batch_size": 10_000_000, "epochs": 1_000_000,
              "max_heavy_atoms": 100_000}
"""The largest value of each size of a run (``RunConfig`` or ``TrainConfig``)."""


KERNEL_MAX_TRAIN = 20000
"""Most training molecules the kernel ridge is fitted on (``--kernel-ridge``: auto skips
it above, on refuses). Its closed-form fit grows as M^3 in time and M^2 in memory."""


DEVICE_HELP = ("where the model runs: auto (CUDA when available, else the CPU), cpu, cuda "
               "or cuda:N")


PRECISIONS = ("fp32", "bf16")
"""fp32, or bfloat16 autocast of the training forward passes (weights, optimiser and
evaluation stay float32)."""


_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device(spec: str) -> None:
    """Raises SettingError naming ``device`` unless ``spec`` is auto, cpu, cuda or cuda:N."""
    if not isinstance(spec, str) or not _DEVICE.fullmatch(spec):
        raise SettingError("device", f"must be auto, cpu, cuda or cuda:N, got {spec!r}")


def _no_cuda_reason() -> str:
    if torch.version.cuda is None:
        return f"this PyTorch ({torch.__version__}) is built without CUDA"
    return "no CUDA device is visible"


def resolve_device(spec: str) -> torch.device:
    """The ``torch.device`` of a ``--device`` value.

    Args:
        spec: "auto" (CUDA when available, else the CPU), "cpu", "cuda" (under
            torchrun ``cuda:$LOCAL_RANK``, else ``cuda:0``) or "cuda:N".

    Raises:
        SettingError: naming ``device`` for another value, for CUDA asked for where
            there is none, or for a GPU index out of range.
    """
    check_device(spec)
    if spec == "cpu" or (spec == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SettingError("device", f"{spec} asked for, but {_no_cuda_reason()}; use cpu "
                           f"(or auto)", colon=True)
    index = int(spec.split(":")[1]) if ":" in spec else int(os.environ.get("LOCAL_RANK", 0))
    if index >= torch.cuda.device_count():
        raise SettingError("device", f"{spec}: there are only "
                           f"{torch.cuda.device_count()} CUDA device(s)", colon=True)
    return torch.device("cuda", index)


SPLITS: tuple[str, ...] = ("random", "scaffold", "kfold", "column")
"""The split names the command line accepts."""


def check_sizes(sizes: Sequence[float]) -> tuple[float, float, float]:
    """Validate split fractions.

    Args:
        sizes: (train, validation, test) fractions.

    Returns:
        The three fractions as floats.

    Raises:
        ValueError: naming ``--split-sizes`` unless there are three positive
            fractions summing to 1.
    """
    if len(sizes) != 3:
        raise SettingError("split_sizes", f"expected 3 fractions (train val test), got "
                           f"{len(sizes)}", colon=True)
    train, val, test = (float(s) for s in sizes)
    if min(train, val, test) <= 0 or not math.isclose(train + val + test, 1.0, abs_tol=1e-6):
        raise SettingError("split_sizes", f"must be positive fractions summing to 1, got "
                           f"{list(sizes)}")
    return train, val, test


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


@dataclass
class NetworkConfig:
    """Everything needed to rebuild a ``MoleculeNetwork`` (stored in checkpoints as JSON).

    Attributes:
        num_tasks: T, targets predicted per molecule.
        task: "regression" or "classification" (T independent binary tasks).
        hidden: D, atom state width (divisible by ``heads``).
        layers: L, graph attention layers.
        heads: H, attention heads in each layer and in the readout.
        conv: "gat" (the default) or "gatv2".
        norm: "none" or "layer" (LayerNorm before each attention layer).
        dropout: dropout in the head MLP and on attention weights.
        descriptor_dim: width of per-molecule descriptors appended to the readout (0: none).
        atom_dim: F_atom, atom feature width.
        bond_dim: F_bond, bond feature width (one more slot marks self loops).
        global_layers: how many of the last graph attention layers are each followed by
            a global attention block over all atoms of the molecule (0: none).
        max_hops: K of the global blocks' distance bias: bond distances of K or more
            share one bias.
    """

    num_tasks: int = bounded(1, Range(1, largest=MODEL_BOUNDS["num_tasks"]))
    task: str = "regression"
    hidden: int = option(96, "atom state width (divisible by --heads)", type=int,
                         bounds=Range(1, largest=MODEL_BOUNDS["hidden"]))
    layers: int = option(1, "graph attention layers", type=int,
                         bounds=Range(0, largest=MODEL_BOUNDS["layers"]))
    heads: int = option(4, "attention heads per layer and in the readout", type=int,
                        bounds=Range(1, largest=MODEL_BOUNDS["heads"]))
    conv: str = option("gat", "graph attention layers: gat (one projection per layer, "
                       "scores from per-atom terms), or gatv2 (scores from every atom pair's "
                       "features: slower)", choices=["gat", "gatv2"])
    norm: str = "none"
    dropout: float = option(0.0, "dropout in the head and on attention weights", type=float,
                            bounds=Range(0, below=1))
    descriptor_dim: int = bounded(0, Range(0, largest=MODEL_BOUNDS["descriptor_dim"]))
    atom_dim: int = bounded(ATOM_FEATURE_DIM, Range(0, largest=MODEL_BOUNDS["atom_dim"]))
    bond_dim: int = bounded(BOND_FEATURE_DIM, Range(0, largest=MODEL_BOUNDS["bond_dim"]))
    global_layers: int = option(0, "follow each of the last N graph attention layers by "
                                "global attention over all atoms of the molecule, biased "
                                "by bond distance", type=int)
    max_hops: int = option(8, "bond distances of this many hops or more share one bias "
                           "in the global attention", type=int,
                           bounds=Range(1, largest=MODEL_BOUNDS["max_hops"]))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, source: str = "model config",
                  prefix: str = "") -> NetworkConfig:
        """The config of a JSON dict; unknown keys and wrong types are refused naming
        the key (see ``config_from_dict``), sizes are checked by ``validate``."""
        return config_from_dict(cls, d, source, prefix)

    def validate(self) -> None:
        """Raises ValueError naming a setting out of range (``SettingError``: its
        keyword, before anything is allocated: a file may claim any size) or at odds
        with another."""
        check_ranges(self)
        if self.task not in ("regression", "classification"):
            raise SettingError("task", f"must be regression or classification, got "
                               f"{self.task!r}")
        if self.conv not in ("gat", "gatv2"):
            raise SettingError("conv", f"must be 'gat' or 'gatv2', got {self.conv!r}")
        if self.norm not in ("none", "layer"):
            raise SettingError("norm", f"must be 'none' or 'layer', got {self.norm!r}")
        if self.hidden % self.heads:
            raise SettingError("hidden", f"{self.hidden} is not divisible by heads "
                               f"{self.heads}", colon=True)
        if not 0 <= self.global_layers <= self.layers:
            raise SettingError("global_layers", f"must be between 0 and layers "
                               f"{self.layers}, got {self.global_layers}")


MEMBERS = ("auto", "apart", "together")
"""How an ensemble's networks train (``RunConfig.members``)."""


def together_clash(train: TrainConfig, model: NetworkConfig) -> str | None:
    """The flag that keeps an ensemble's networks from training together
    (``RunConfig.members``), or None."""
    return ("--conv gatv2" if model.conv != "gat" else
            "--global-layers" if model.global_layers else
            "--precision bf16" if train.precision != "fp32" else
            "--compile" if train.compile else
            "--freeze-epochs" if train.freeze_epochs else
            "--encoder-lr" if train.encoder_lr != 1.0 else None)


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
        device: "auto", "cpu", "cuda" or "cuda:N" (``setattn.molprop.distributed``).
        precision: "fp32", or "bf16" for bfloat16 autocast of the training forward passes.
        compile: train through ``torch.compile(model, dynamic=True)`` (the same model and
            weights; validation and prediction stay eager).
        freeze_epochs: with a pretrained encoder, the first epochs in which it stays
            frozen and only the head trains.
        encoder_lr: with a pretrained encoder, its learning rate as a fraction of
            ``lr`` (the head keeps ``lr``; the OneCycle schedule scales both alike).
    """

    epochs: int = option(60, "maximum number of epochs", type=int,
                         bounds=Range(1, largest=RUN_BOUNDS["epochs"]))
    batch_size: int | None = option(96, "molecules per batch", type=int,
                                    bounds=Range(1, largest=RUN_BOUNDS["batch_size"]))
    lr: float = lr_option()
    weight_decay: float = weight_decay_option()
    patience: int = option(20, "early stopping: epochs without a better validation metric",
                           type=int, bounds=Range(1))
    seed: int = 0
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")
    precision: str = option("fp32", "fp32, or bf16: bfloat16 autocast of the training forward "
                            "passes (weights and evaluation stay float32)", choices=PRECISIONS)
    compile: bool = option(False, "train through torch.compile: a one-off compile (about a "
                           "minute on a CPU, needs a C++ compiler there), then faster steps; "
                           "pays on large training sets", action="store_true")
    freeze_epochs: int = option(0, "with --pretrained: the first N epochs train the head "
                                "alone, the pretrained encoder frozen", type=int,
                                bounds=Range(0, largest=RUN_BOUNDS["epochs"]))
    encoder_lr: float = option(1.0, "with --pretrained: the encoder's learning rate as a "
                               "fraction of --lr (the head keeps --lr)", type=float,
                               bounds=Range(0, low_open=True, finite=True))

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
        seed: split seed; ensemble member k is initialised with ``seed + k`` (and, with
            ``members`` "apart", draws its batches with it).
        fold: the test fold of a k-fold split.
        ensemble_size: K models trained on the same split.
        members: "apart" trains the K networks one after another, member k with the
            batch order of ``seed + k``; "together" trains them side by side on the
            batches of ``seed``, one pass for all (``setattn.molprop.members``); "auto"
            trains them together where ``together_clash`` finds nothing against it and
            the run is one process, else apart (a ``config.json`` without the key, saved
            before it existed, trained apart).
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
        kernel_vectors: "none", "default" (the encoder shipped in the package,
            ``setattn.molprop.shipped``) or the path of an ``encoder.pt`` of ``setattn
            pretrain``: a kernel ridge on that frozen encoder's molecule vectors is
            stacked with the descriptor and fingerprint ridges
            (``setattn.molprop.kernels.VectorRidge``).
        network_weight: "stacked" fits the network's weight in the blend of a regression
            model per task on the validation part (``setattn.molprop.ensemble``);
            "fixed", and every classification model, keep 0.5.
        pretrained: "none", "default" (the shipped encoder), or the path of an encoder
            of ``setattn pretrain`` (``encoder.pt``) each network starts from; its
            architecture settings replace the model's
            (``setattn.molprop.pretrain.ARCHITECTURE``).
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
                        choices=list(SPLITS))
    split_column: str = option("split", "with --split column: the column naming each row's "
                               "part, train, val or test (the test part may be empty)")
    split_sizes: list[float] = option([0.8, 0.1, 0.1], "train, validation and test fractions",
                                      nargs=3, type=float, metavar=("TRAIN", "VAL", "TEST"))
    seed: int = option(0, "split seed; ensemble member k uses seed + k for its "
                       "initialisation (and its batch order with --members apart)",
                       type=int, bounds=Range(0))
    fold: int = option(0, "test fold of --split kfold (round(1 / test fraction) folds)",
                       type=int)
    ensemble_size: int = option(3, "models trained on the same split", type=int,
                                bounds=Range(1, largest=RUN_BOUNDS["ensemble_size"]))
    members: str = option("auto", "how the ensemble's networks train: together (side by "
                          "side on shared batches, one pass for all: faster; GAT layers "
                          "without global layers, fp32, one process), apart (one after "
                          "another, each with its own batch order), or auto (together "
                          "where it can)", choices=list(MEMBERS))
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
    kernel_vectors: str = option("none", "stack a kernel ridge on a pretrained encoder's "
                                 "molecule vectors with the descriptor and fingerprint "
                                 "kernel ridges, weighted by their leave-one-out errors: "
                                 "default (the encoder shipped with setattn), the encoder.pt "
                                 "of setattn pretrain, or none", metavar="ENCODER")
    network_weight: str = option("stacked", "the attention network's weight against the "
                                 "kernel ridge in regression: stacked (per task, fitted on "
                                 "the validation part and shrunk toward 0.5 by its standard "
                                 "error) or fixed (0.5, as classification always has)",
                                 choices=["stacked", "fixed"])
    pretrained: str = option("none", "start every network from a pretrained encoder: "
                             "default (the one shipped with setattn) or the "
                             "encoder.pt of setattn pretrain, whose architecture (--hidden, "
                             "--layers, --heads, --conv, --global-layers) it takes, or none",
                             metavar="ENCODER")
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
        if self.split not in SPLITS:
            raise SettingError("split", f"must be one of {list(SPLITS)}, got "
                               f"{self.split!r}")
        check_sizes(self.split_sizes)
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
        if self.train.freeze_epochs and self.pretrained == "none":
            raise SettingError("freeze_epochs", "needs a pretrained encoder (--pretrained)",
                               colon=True)
        if self.train.encoder_lr != 1.0 and self.pretrained == "none":
            raise SettingError("encoder_lr", "needs a pretrained encoder (--pretrained)",
                               colon=True)
        if self.members not in MEMBERS:
            raise SettingError("members", f"must be auto, apart or together, got "
                               f"{self.members!r}")
        clash = together_clash(self.train, self.model)
        if self.members == "together" and clash is not None:
            raise SettingError("members", f"together cannot train with {clash}; use "
                               f"--members apart or auto", colon=True)
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
        top.setdefault("members", "apart")  # runs saved before the key trained apart
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


DEFAULT_DESCRIPTORS = "rdkit"
"""Descriptor set unless ``descriptors`` says otherwise (how it was chosen:
``docs/guide/defaults.rst``)."""


DESCRIPTORS = ("fast", "lean", "rdkit", "none")
"""The descriptor sets (``setattn.chem.descriptors``): RDKit's 2D descriptors less
the slow path indices and the substructure counts, less the path indices only, all of
them, or none."""


def run_flags() -> list[tuple[str, Field]]:
    """Every option that is a config field, with where it lives in a ``RunConfig``:
    "" the run itself, or its "train" or "model" settings."""
    return ([("", f) for f in flag_fields(RunConfig)]
            + [("train", f) for f in flag_fields(TrainConfig)]
            + [("model", f) for f in flag_fields(NetworkConfig)])


def option_names() -> list[str]:
    """The names ``new_run`` accepts, in flag order (``descriptors`` last)."""
    return [f.name for _, f in run_flags()] + ["descriptors"]


def config_section(run: RunConfig, section: str) -> Any:
    """The part of ``run`` a ``run_flags`` section names."""
    return run if not section else run.train if section == "train" else run.model


def descriptor_dim(descriptors: str | None) -> int:
    """F_desc of a descriptor set (None: ``DEFAULT_DESCRIPTORS``).

    Raises:
        SettingError: naming ``descriptors`` for an unknown set.
    """
    descriptors = DEFAULT_DESCRIPTORS if descriptors is None else descriptors
    if descriptors not in DESCRIPTORS:
        raise SettingError("descriptors", f"must be fast, lean, rdkit or none, got {descriptors!r}")
    return 0 if descriptors == "none" else descriptor_count(descriptors)


_KINDS = {"int": (Integral, int), "float": (Real, float), "str": (str, str),
          "bool": (bool, bool)}
"""A field's annotation -> (what a value must be an instance of, what it is stored as)."""


def _typed(name: str, annotation: str, value: Any) -> Any:
    """``value`` as a field annotated ``annotation`` stores it (an int where a float is
    expected becomes a float), or a TypeError naming the option."""
    base = annotation.removesuffix(" | None")
    if base.startswith("list["):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"option {name}: must be a list of {base[5:-1]}, got {value!r}")
        return [_typed(name, base[5:-1], v) for v in value]
    kind, stored = _KINDS[base]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise TypeError(f"option {name}: must be {'a' if base != 'int' else 'an'} {base}, "
                        f"got {value!r}")
    return stored(value)


def new_run(options: Mapping[str, Any]) -> RunConfig:
    """A new run with ``options`` set and defaults for the rest (an option given as
    None takes its default, as a flag left out does).

    The ``seed`` option seeds the split and the models alike. ``num_tasks`` and
    ``task`` of the model follow the run. Nothing is validated here (see
    ``RunConfig.validate``) except the names and the types.

    Raises:
        ValueError: for a name that is not an option, listing the options.
        TypeError: naming the option whose value is not of its type (an int is a float
            where a float is expected).
    """
    unknown = sorted(set(options) - set(option_names()))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; options: {option_names()}")
    run = RunConfig()
    for section, f in run_flags():
        value = options.get(f.name)
        if value is not None:
            setattr(config_section(run, section), f.name, _typed(f.name, f.type, value))
    if options.get("seed") is not None:
        run.train.seed = run.seed
    run.model.descriptor_dim = descriptor_dim(options.get("descriptors"))
    run.model.num_tasks = len(run.target_columns or [None])
    run.model.task = run.task
    return run
