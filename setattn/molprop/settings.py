"""Options -> a ``RunConfig``: the one mapping behind ``setattn train``'s flags and the
keywords of ``MoleculePredictor``.

An option is a flag field of ``RunConfig``, ``TrainConfig`` or ``MoleculeModelConfig``
(made with ``option``), named like the field (``batch_size``; the flag is
``--batch-size``), plus ``descriptors`` ("fast", "lean", "rdkit" or "none"), which sets the model's
descriptor width.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field
from numbers import Integral, Real
from typing import Any

from setattn.chem.descriptors import descriptor_count
from setattn.molprop.config import RunConfig, TrainConfig
from setattn.molprop.model import MoleculeModelConfig
from setattn.molprop.options import SettingError, flag_fields

__all__ = ["DEFAULT_DESCRIPTORS", "DESCRIPTORS", "config_section", "new_run", "option_names",
           "run_flags"]

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
            + [("model", f) for f in flag_fields(MoleculeModelConfig)])


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
