"""The checkpoint format of molecule runs: what is saved, and how it is read back safely.

A run directory holds ``config.json`` (the ``RunConfig``) and, per ensemble member k,
``model_<k>/best.pt`` (the best-validation weights, for prediction) and
``model_<k>/last.pt`` (the full training state, for ``--resume``).

Checkpoints are plain dicts of tensors and JSON-like values with a format marker,
written atomically (temporary file in the same folder, then ``os.replace``) and read
with ``torch.load(..., weights_only=True)``: a file that is not ours is refused and
never executes code.

Each checkpoint also holds ``checksum``, the SHA-256 of its tensor data
(``tensor_checksum``: every tensor's place in the dict, dtype, shape and bytes, in a
fixed order), verified at every load: a file damaged inside its tensor data (a flipped
bit the zip container does not notice) is refused with a ``CheckpointError`` naming it,
in ``predict``, ``explain``, ``--resume`` and ``MoleculePredictor.load`` alike. A
checkpoint without the key (written before checksums existed) is read as before,
unverified.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from setattn.files import atomic_open
from setattn.molprop.config import FORMAT, RunConfig
from setattn.molprop.conformal import Calibration
from setattn.molprop.model import MoleculeModel, MoleculeModelConfig
from setattn.molprop.options import key_error

__all__ = ["CheckpointError", "build_model", "load_checkpoint", "load_model", "load_run",
           "on_cpu", "read_calibration", "save_checkpoint", "snapshot", "tensor_checksum"]

_UNCHECKED = ("setattn_format", "checksum")  # the keys a checksum does not cover


class CheckpointError(ValueError):
    """A file that is not a setattn checkpoint (or not the kind expected)."""


def save_checkpoint(payload: dict, path: str | Path) -> Path:
    """Write ``payload`` atomically: a temporary file in the same folder, then rename.

    A crash while writing leaves the previous checkpoint untouched. Tensors are saved
    on the CPU, whatever device they are on, so the file loads anywhere.

    Args:
        payload: a dict of tensors and JSON-like values (no other objects); its
            ``setattn_format`` and ``checksum`` keys, if any, are replaced.
        path: the checkpoint file.
    """
    content = {k: v for k, v in on_cpu(payload).items() if k not in _UNCHECKED}
    with atomic_open(path, "wb") as handle:
        torch.save({"setattn_format": FORMAT, **content,
                    "checksum": tensor_checksum(content)}, handle)
    return path


def _tensors(obj: Any, where: str) -> Iterator[tuple[str, Tensor]]:
    """(place, tensor) of every tensor in ``obj``: dicts by sorted key, lists in order."""
    if isinstance(obj, Tensor):
        yield where, obj
    elif isinstance(obj, dict):
        for key in sorted(obj, key=str):
            yield from _tensors(obj[key], f"{where}/{key}")
    elif isinstance(obj, (list, tuple)):
        for k, value in enumerate(obj):
            yield from _tensors(value, f"{where}/{k}")


def tensor_checksum(payload: dict) -> str:
    """SHA-256 (hex) of a checkpoint's tensor data: each tensor's place, dtype, shape and
    bytes, in a fixed order; the ``setattn_format`` and ``checksum`` keys are left out."""
    digest = hashlib.sha256()
    content = {k: v for k, v in payload.items() if k not in _UNCHECKED}
    for where, tensor in _tensors(content, ""):
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{where}:{flat.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _verify(ckpt: dict, path: Path) -> None:
    """Refuse a checkpoint whose tensor data does not match its checksum (none: one
    written before checksums, read unverified)."""
    stored = ckpt.get("checksum")
    if stored is None:
        return
    if not isinstance(stored, str) or stored != tensor_checksum(ckpt):
        raise CheckpointError(f"{path}: damaged checkpoint: its tensor data does not match "
                              f"the checksum written with it; restore the file from a copy "
                              f"or train again")


def on_cpu(obj: Any) -> Any:
    """``obj`` with every tensor in it on the CPU; dicts and lists holding none that
    must move are ``obj`` itself (so a CPU payload is saved exactly as given)."""
    if isinstance(obj, Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        moved = {k: on_cpu(v) for k, v in obj.items()}
        return obj if all(moved[k] is v for k, v in obj.items()) else moved
    if isinstance(obj, list):
        moved_list = [on_cpu(v) for v in obj]
        return obj if all(a is b for a, b in zip(moved_list, obj)) else moved_list
    return obj


_REQUIRED = {
    "model": ("kind", "config", "state_dict", "meta"),
    "training": ("kind", "config", "state_dict", "optimizer", "scheduler", "rng", "progress"),
}


def load_checkpoint(path: str | Path, kind: str = "model",
                    map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint written by ``save_checkpoint``, refusing anything else.

    Loading uses ``torch.load(..., weights_only=True)``: a pickle that would import
    or call code is rejected before anything runs.

    Args:
        path: the file.
        kind: "model" (best weights, for prediction) or "training" (resume state).
        map_location: the device its tensors are loaded onto.

    Returns:
        The checkpoint dict.

    Raises:
        FileNotFoundError: if ``path`` does not exist (naming it).
        CheckpointError: naming ``path`` if it is not a setattn checkpoint of that kind,
            or its tensor data does not match its checksum (damaged).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:  # refused by the weights-only unpickler
        code = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        if code:
            raise CheckpointError(
                f"{path}: not a setattn checkpoint: loading it would run code "
                f"({code.group(1)}); refused by torch.load(weights_only=True), nothing was "
                f"executed"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(err))
        raise CheckpointError(
            f"{path}: not a setattn checkpoint (torch.load(weights_only=True) refused it"
            f"{': ' + detail.group(1).strip() if detail else ''}); nothing was executed"
        ) from None
    except Exception as err:  # truncated or not a torch file at all
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"{path}: not a setattn checkpoint (unreadable by torch.load: {reason})"
        ) from None
    if not isinstance(ckpt, dict) or "setattn_format" not in ckpt:
        raise CheckpointError(f"{path}: not a setattn checkpoint (no 'setattn_format' marker)")
    if ckpt["setattn_format"] != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {ckpt['setattn_format']!r} is not "
                              f"{FORMAT}; it was written by another setattn version")
    _verify(ckpt, path)
    missing = [key for key in _REQUIRED[kind] if key not in ckpt]
    if missing or ckpt.get("kind") != kind:
        raise CheckpointError(f"{path}: not a setattn {kind} checkpoint "
                              f"(kind {ckpt.get('kind')!r}, missing keys {missing})")
    return ckpt


def build_model(ckpt: dict, path: Path, device: str | torch.device = "cpu") -> MoleculeModel:
    """A model on ``device`` from a checkpoint's config and weights; mismatches name the
    file.

    The config is checked (keys, types, and sizes against ``limits.MODEL_BOUNDS``)
    before the model is built, so a file claiming absurd sizes allocates nothing.
    """
    try:
        config = MoleculeModelConfig.from_dict(ckpt["config"], str(path), "config.")
        config.validate()
    except ValueError as err:
        if not str(err).startswith(str(path)):  # a size or setting out of range
            keys = {f.name: "config." for f in fields(MoleculeModelConfig)}
            err = key_error(err, str(path), keys)
        raise CheckpointError(f"{str(err).strip().splitlines()[0]} (model config refused "
                              f"before building it)") from None
    try:
        model = MoleculeModel(config).to(device)
        state = dict(ckpt["state_dict"])
        if model.kernel is None:  # saved before models had a blend weight: the network alone
            state.setdefault("blend", model.blend.clone())
        else:  # saved before the kernel ridge could be a Laplacian one: an RBF
            state.setdefault("kernel.norm", model.kernel.norm.clone())
        model.load_state_dict(state)
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        first = str(err).strip().splitlines()[0]
        raise CheckpointError(
            f"{path}: the weights do not match the model its config describes ({first})"
        ) from None
    return model.eval()


def load_model(path: str | Path, device: str | torch.device = "cpu"
               ) -> tuple[MoleculeModel, dict]:
    """A trained model (in eval mode, on ``device``) and its metadata from a ``best.pt``
    file.

    Returns:
        (model, meta) with meta holding ``task``, ``target_columns``,
        ``smiles_column``, ``epoch`` and ``val`` metrics.
    """
    path = Path(path)
    ckpt = load_checkpoint(path, "model", map_location=device)
    return build_model(ckpt, path, device), dict(ckpt["meta"])


def load_run(path: str | Path, device: str | torch.device = "cpu", *,
             name: str = "--model") -> tuple[list[MoleculeModel], dict]:
    """The ensemble of a run directory (or one ``best.pt`` file) for prediction, on
    ``device``; ``name`` is the argument ``path`` came as, for messages (the flag
    ``--model``, or ``MoleculePredictor.load``'s ``directory``).

    Returns:
        (models, meta): the K models in eval mode and the first one's metadata, with
        ``meta["conformal"]`` the run's prediction-interval ``Calibration`` where a
        finished regression run saved one.

    Raises:
        FileNotFoundError: naming the folder or file that is missing.
        CheckpointError: if a checkpoint is not ours.
    """
    path = Path(path)
    if path.is_file():
        model, meta = load_model(path, device)
        return [model], meta
    config_path = path / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(
            f"argument {name}: {path} is not a setattn run directory (no config.json)"
        )
    run = RunConfig.read(config_path)
    loaded = [load_model(path / f"model_{k}" / "best.pt", device)
              for k in range(run.ensemble_size)]
    meta = dict(loaded[0][1])
    calibration = read_calibration(path / "metrics.json")
    if calibration is not None:
        meta["conformal"] = calibration
    return [m for m, _ in loaded], meta


def read_calibration(metrics_path: Path) -> Calibration | None:
    """The prediction-interval calibration a finished run saved in its ``metrics.json``
    (None: no such file, a classification run, or a run from before intervals).

    Raises:
        ValueError: naming the file if it is not JSON or its calibration is malformed.
    """
    if not metrics_path.is_file():
        return None
    try:
        metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{metrics_path}: not valid JSON ({err})") from err
    saved = metrics.get("uncertainty", {}).get("calibration") if isinstance(metrics, dict) else None
    return None if saved is None else Calibration.from_dict(saved, str(metrics_path))


def snapshot(obj: Any) -> Any:
    """``obj`` with every tensor, dict and list in it copied (plain values shared): what
    ``copy.deepcopy`` gives a checkpoint payload, in less time."""
    if isinstance(obj, Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [snapshot(v) for v in obj]
    return obj
