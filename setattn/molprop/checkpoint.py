"""A run directory's files: the checkpoint format, the run's marker and lock, the checks
that keep outputs off inputs, and the data's fingerprint.

A run directory holds ``config.json`` (the ``RunConfig``), per ensemble member k
``model_<k>/best.pt`` (the network's best-validation weights) and ``model_<k>/last.pt``
(its full training state, for ``--resume``), and ``ensemble.pt``: the kernel part, its
config and the networks' weight against it (``setattn.molprop.ensemble``), written once
per run. ``load_run`` puts them together as an ``Ensemble``.

Runs written by setattn 0.2.0 kept a copy of the kernel part and the weight inside every
member's ``best.pt`` and had no ``ensemble.pt``; ``load_run`` reads them as they are
(``_split_legacy``), and ``--resume`` refuses to continue one, saying so.

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
import math
import os
import pickle
import re
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from setattn.datasets.files import file_sha256
from setattn.datasets.molecules import MoleculeSet
from setattn.files import atomic_open, check_folder
from setattn.molprop.config import (
    FORMAT,
    MODEL_BOUNDS,
    NetworkConfig,
    RunConfig,
    key_error,
)
from setattn.molprop.conformal import Calibration
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.kernels import KernelConfig, KernelPart
from setattn.molprop.network import MoleculeNetwork

__all__ = ["ENSEMBLE_FILE", "LEGACY_KEYS", "LOCK_NAME", "RUN_MARKER", "RUN_RECORDS",
           "CheckpointError", "RunLock", "build_network", "check_not_destination",
           "check_output_dir", "check_run_dir", "check_same_data",
           "data_fingerprint", "load_checkpoint", "load_network", "load_run", "mark_run_dir",
           "on_cpu", "read_calibration", "read_ensemble_config", "run_file_paths",
           "save_checkpoint", "save_ensemble", "snapshot", "tensor_checksum"]

ENSEMBLE_FILE = "ensemble.pt"
"""The file of a run directory holding its kernel part and the networks' weight."""

LEGACY_KEYS = ("kernel_size", "fingerprint_kernel", "fitted_blend")
"""Keys of a 0.2.0 network config that described the kernel part held in each member."""

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
    "ensemble": ("kind", "config", "state_dict"),
    "training": ("kind", "config", "state_dict", "optimizer", "scheduler", "rng", "progress"),
    "pretrained": ("kind", "config", "state_dict", "meta"),
    "pretraining": ("kind", "config", "state_dict", "optimizer", "scheduler", "progress"),
}


def load_checkpoint(path: str | Path, kind: str | None = "model",
                    map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint written by ``save_checkpoint``, refusing anything else.

    Loading uses ``torch.load(..., weights_only=True)``: a pickle that would import
    or call code is rejected before anything runs.

    Args:
        path: the file.
        kind: "model" (a network's best weights), "training" (its resume state),
            "ensemble" (a run's kernel part and weight), "pretrained" (an encoder of
            ``setattn.molprop.pretrain``), "pretraining" (its resume state), or None:
            any of them (``ckpt["kind"]`` says which).
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
    if kind is None:
        kind = ckpt.get("kind")
        if kind not in _REQUIRED:
            raise CheckpointError(f"{path}: not a setattn checkpoint of a known kind "
                                  f"(kind {kind!r})")
    missing = [key for key in _REQUIRED[kind] if key not in ckpt]
    if missing or ckpt.get("kind") != kind:
        raise CheckpointError(f"{path}: not a setattn {kind} checkpoint "
                              f"(kind {ckpt.get('kind')!r}, missing keys {missing})")
    return ckpt


def _split_legacy(config: dict, state: dict) -> tuple[dict, dict, dict | None, dict]:
    """A 0.2.0 member checkpoint's network config and state, and the kernel config and
    the ensemble state (weight and kernel part) it held (kernel config None: none)."""
    net_config = {k: v for k, v in config.items() if k not in LEGACY_KEYS}
    size = int(config.get("kernel_size", 0))
    moved = {"kernel.": "kernel.descriptor.", "fingerprint_kernel.": "kernel.fingerprint.",
             "kernel_mix": "kernel.mix", "blend": "weight"}
    net_state, ensemble_state = {}, {}
    for key, value in state.items():
        target = next((new + key[len(old):] for old, new in moved.items()
                       if key.startswith(old)), None)
        if target is None:
            net_state[key] = value
        else:
            ensemble_state[target] = value
    kernel = None
    if size:
        kernel = {"size": size, "descriptor_dim": int(config.get("descriptor_dim", 0)),
                  "num_tasks": int(config.get("num_tasks", 1)),
                  "task": config.get("task", "regression"),
                  "fingerprints": bool(config.get("fingerprint_kernel", False))}
        # saved before the kernel ridge could be a Laplacian one: an RBF
        ensemble_state.setdefault("kernel.descriptor.norm",
                                  torch.tensor(2.0, dtype=torch.float64, device="cpu"))
    return net_config, net_state, kernel, ensemble_state


def _refused(err: Exception, path: Path, keys: dict[str, str], what: str) -> CheckpointError:
    """The error for a config in ``path`` refused before building: the first line,
    naming the key."""
    if not str(err).startswith(str(path)):  # a size or setting out of range
        err = key_error(err, str(path), keys)
    return CheckpointError(f"{str(err).strip().splitlines()[0]} ({what} refused before "
                           f"building it)")


def build_network(ckpt: dict, path: Path, device: str | torch.device = "cpu"
                  ) -> MoleculeNetwork:
    """A network on ``device`` from a checkpoint's config and weights (a 0.2.0 member's:
    the network part of it); mismatches name the file.

    The config is checked (keys, types, and sizes against ``limits.MODEL_BOUNDS``)
    before the network is built, so a file claiming absurd sizes allocates nothing.
    """
    config_dict, state, _, _ = _split_legacy(dict(ckpt["config"]), dict(ckpt["state_dict"]))
    try:
        config = NetworkConfig.from_dict(config_dict, str(path), "config.")
        config.validate()
    except ValueError as err:
        raise _refused(err, path, {f.name: "config." for f in fields(NetworkConfig)},
                       "model config") from None
    try:
        network = MoleculeNetwork(config).to(device)
        network.load_state_dict(state)
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        first = str(err).strip().splitlines()[0]
        raise CheckpointError(
            f"{path}: the weights do not match the model its config describes ({first})"
        ) from None
    return network.eval()


def load_network(path: str | Path, device: str | torch.device = "cpu"
                 ) -> tuple[MoleculeNetwork, dict]:
    """A trained network (in eval mode, on ``device``) and its metadata from a
    ``best.pt`` file.

    Returns:
        (network, meta) with meta holding ``task``, ``target_columns``,
        ``smiles_column``, ``epoch`` and ``val`` metrics.
    """
    path = Path(path)
    ckpt = load_checkpoint(path, "model", map_location=device)
    return build_network(ckpt, path, device), dict(ckpt["meta"])


def save_ensemble(path: str | Path, members: int, kernel: KernelPart | None, weight: Tensor,
                  how: str) -> Path:
    """Write a run's kernel part and the networks' weight (the networks are saved one by
    one by training) as an "ensemble" checkpoint.

    Args:
        path: the file (a run's ``ENSEMBLE_FILE``).
        members: K, the networks of the run.
        kernel: the fitted kernel part, or None.
        weight: () or (T,), the networks' weight (``Ensemble.weight``).
        how: how the weight was set: "stacked" (fitted per task), "fixed", or "none"
            (no kernel part).
    """
    state = {"weight": weight}
    if kernel is not None:
        state.update({f"kernel.{k}": v for k, v in kernel.state_dict().items()})
    config = {"members": members, "weight": how,
              "kernel": None if kernel is None else kernel.config.to_dict()}
    return save_checkpoint({"kind": "ensemble", "config": config, "state_dict": state,
                            "meta": {}}, path)


def _kernel_config(saved: object, path: Path) -> KernelConfig | None:
    """The kernel part's config of an ensemble checkpoint, checked (None: none)."""
    if saved is None:
        return None
    try:
        config = KernelConfig(**saved)
        sizes = (config.size, config.descriptor_dim, config.num_tasks)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sizes):
            raise ValueError("sizes must be positive integers")
        if config.task not in ("regression", "classification"):
            raise ValueError(f"unknown task {config.task!r}")
        if config.size > MODEL_BOUNDS["kernel_size"]:
            raise ValueError(f"size {config.size} is over {MODEL_BOUNDS['kernel_size']}")
        if config.descriptor_dim > MODEL_BOUNDS["descriptor_dim"]:
            raise ValueError(f"descriptor_dim {config.descriptor_dim} is over "
                             f"{MODEL_BOUNDS['descriptor_dim']}")
        config.encoder_config()  # the vector ridge's encoder, checked before it is built
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: kernel config refused before building it ({err})"
                              ) from None
    return config


def read_ensemble_config(run_dir: Path) -> dict | None:
    """The saved ``ensemble.pt`` config of a run directory (None: not written yet)."""
    path = Path(run_dir) / ENSEMBLE_FILE
    return dict(load_checkpoint(path, "ensemble")["config"]) if path.is_file() else None


def _ensemble(networks: list[MoleculeNetwork], kernel_config: KernelConfig | None,
              state: dict, path: Path, device: str | torch.device) -> Ensemble:
    """The ensemble of ``networks`` with the kernel part and weight of ``state``."""
    try:
        kernel = None if kernel_config is None else KernelPart(kernel_config).to(device)
        weight = state.get("weight")
        ensemble = Ensemble(networks, kernel, None if weight is None else weight.to(device))
        missing, unexpected = ensemble.load_state_dict(
            {**{f"networks.{k}": v for k, v in ensemble.networks.state_dict().items()},
             **state}, strict=False)
        missing = [k for k in missing if k != "weight"]  # none saved: the default
        if missing or unexpected:
            raise KeyError(f"missing {missing}, unexpected {unexpected}")
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        first = str(err).strip().splitlines()[0]
        raise CheckpointError(f"{path}: the kernel part does not match its config "
                              f"({first})") from None
    return ensemble.to(device).eval()


def _legacy_run(path: Path, device: str | torch.device) -> tuple[KernelConfig | None, dict]:
    """The kernel config and ensemble state of a 0.2.0 run or file: the copy held by
    its first member's ``best.pt`` (every member held the same)."""
    ckpt = load_checkpoint(path, "model", map_location=device)
    _, _, kernel, state = _split_legacy(dict(ckpt["config"]), dict(ckpt["state_dict"]))
    return _kernel_config(kernel, path), state


def load_run(path: str | Path, device: str | torch.device = "cpu", *,
             name: str = "--model") -> tuple[Ensemble, dict]:
    """The ensemble of a run directory (or one ``best.pt`` file: that network alone,
    with the kernel part a 0.2.0 file holds) for prediction, on ``device``; ``name`` is
    the argument ``path`` came as, for messages (the flag ``--model``, or
    ``MoleculePredictor.load``'s ``directory``).

    Returns:
        (ensemble, meta): the ``Ensemble`` in eval mode and the first network's
        metadata, with ``meta["conformal"]`` the run's prediction-interval
        ``Calibration`` where a finished regression run saved one.

    Raises:
        FileNotFoundError: naming the folder or file that is missing.
        CheckpointError: if a checkpoint is not ours.
    """
    path = Path(path)
    if path.is_file():
        network, meta = load_network(path, device)
        kernel, state = _legacy_run(path, device)
        return _ensemble([network], kernel, state, path, device), meta
    config_path = path / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(
            f"argument {name}: {path} is not a setattn run directory (no config.json)"
        )
    run = RunConfig.read(config_path)
    loaded = [load_network(path / f"model_{k}" / "best.pt", device)
              for k in range(run.ensemble_size)]
    ensemble_path = path / ENSEMBLE_FILE
    if ensemble_path.is_file():
        ckpt = load_checkpoint(ensemble_path, "ensemble", map_location=device)
        kernel = _kernel_config(ckpt["config"].get("kernel"), ensemble_path)
        state, source = dict(ckpt["state_dict"]), ensemble_path
    else:  # written by setattn 0.2.0: each member holds the kernel part
        source = path / "model_0" / "best.pt"
        kernel, state = _legacy_run(source, device)
    ensemble = _ensemble([n for n, _ in loaded], kernel, state, source, device)
    meta = dict(loaded[0][1])
    calibration = read_calibration(path / "metrics.json")
    if calibration is not None:
        meta["conformal"] = calibration
    return ensemble, meta


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


LOCK_NAME = ".setattn.lock"
"""The lock file of a run directory."""


RUN_MARKER = ".setattn-run"
"""The marker file that says "this folder is a setattn run" (the first file of a run)."""


RUN_RECORDS = ("config.json", "metrics.json", "split.json", "log.csv", "curve.png")
"""A run directory's own records: ``predict`` reads the first two, ``--resume`` the first
three; no command's output may replace them."""


def run_file_paths(model: Path) -> dict[str, Path]:
    """The files of the run ``--model`` names (its records and weights), which no output
    may be, by a name for error messages."""
    if model.is_file():
        return {"--model": model}
    files = {f"--model's {name}": model / name for name in RUN_RECORDS}
    for f in sorted(model.glob("model_*/*.pt")):
        files[f"--model's {f.parent.name}/{f.name}"] = f
    return files


def check_output_dir(out: str | Path, argument: str = "--output-dir") -> Path:
    """A run directory: an existing folder, or one that can be created.

    Raises:
        ValueError: naming ``argument`` if ``out`` is a file or lies under one, or its
            folder is not writable.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"argument {argument}: {out} is a file, not a directory")
    if out.is_dir():
        if not os.access(out, os.W_OK | os.X_OK):
            raise ValueError(f"argument {argument}: cannot write in {out} (permission denied)")
        return out
    check_folder(out, argument)
    return out


_MEMBER = re.compile(r"model_\d+")  # an ensemble member's folder of checkpoints


def _would_replace(out: Path, extra: Sequence[str]) -> list[str]:
    """The entries of the folder ``out`` that a run would write over: its records,
    ``extra`` names and ``model_<k>`` folders."""
    names = {*RUN_RECORDS, *extra}
    return sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir()
                  if p.name in names or _MEMBER.fullmatch(p.name))


def check_run_dir(out: str | Path, argument: str = "--output-dir", *,
                  resume: bool = False, extra: Sequence[str] = ()) -> Path:
    """A run folder: absent (it will be created), empty, or a setattn run (its marker
    file ``RUN_MARKER``; with ``resume``, also a run written before markers existed:
    one with a ``config.json``).

    Args:
        out: the folder.
        argument: the flag or keyword naming it, for messages.
        resume: the run continues one already in ``out``.
        extra: file names the writer adds to a run's records (the API's ``data.csv``).

    Raises:
        ValueError: naming ``argument``, if ``out`` is a file or not writable, or is a
            folder of other files (the message names those the run would replace).
    """
    out = check_output_dir(out, argument)
    if not out.is_dir() or (out / RUN_MARKER).is_file():
        return out
    if resume and (out / "config.json").is_file():
        return out
    present = sorted(p.name for p in out.iterdir() if p.name != LOCK_NAME)  # RunLock's
    if not present:
        return out
    replaced = _would_replace(out, extra)
    what = (f"the run would replace {', '.join(replaced)}" if replaced
            else f"it holds {', '.join(present[:5])}{' ...' if len(present) > 5 else ''}")
    raise ValueError(f"argument {argument}: {out} is a folder of other files, not a "
                     f"setattn run (no {RUN_MARKER} in it): {what}; choose a new or "
                     f"empty folder")


def mark_run_dir(out: str | Path) -> Path:
    """Create the folder ``out`` if needed and its marker file (kept if present): the
    first file of a run. Call ``check_run_dir`` first. Returns the marker."""
    marker = Path(out) / RUN_MARKER
    if not marker.is_file():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"setattn": "run"}) + "\n", encoding="utf-8")
    return marker


def check_not_destination(out: str | Path, inputs: Mapping[str, str | Path | None],
                          members: int, argument: str = "--output-dir") -> None:
    """No input may be a file the run in ``out`` writes (its records, marker, lock or
    a member's ``best.pt`` / ``last.pt``), compared by resolved path.

    Raises:
        ValueError: naming the input's argument and the file.
    """
    out = Path(out).resolve()
    writes = {out / name for name in (*RUN_RECORDS, RUN_MARKER, LOCK_NAME)}
    writes |= {out / f"model_{k}" / f for k in range(members) for f in ("best.pt", "last.pt")}
    for name, path in inputs.items():
        if path is not None and Path(path).resolve() in writes:
            raise ValueError(f"argument {name}: {path} is a file the run in {out} writes "
                             f"({Path(path).name}); it would be replaced; move it out of "
                             f"{argument} or choose another folder")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


class RunLock:
    """The claim of a run directory by one process (see the module docstring).

    Args:
        out: the run directory (created by ``acquire`` if missing).
        resume: the run continues one in ``out`` (see ``check_run_dir``).
    """

    def __init__(self, out: str | Path, resume: bool = False) -> None:
        self.out = Path(out)
        self.resume = resume
        self.path = self.out / LOCK_NAME
        self.created = False  # the directory was made by this claim
        self.marked = False  # its marker was written by this claim
        self.held = False

    def acquire(self) -> None:
        """Create the directory if needed and the lock file, exclusively; then the
        run's marker (``mark_run_dir``).

        Raises:
            ValueError: naming ``--output-dir`` if another run holds the directory, or
                a dead one left its lock (stale: how to clear it is in the message), or
                the directory cannot be made, or is a folder of other files
                (``check_run_dir``).
        """
        check_run_dir(self.out, resume=self.resume)
        self.created = not self.out.exists()
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            raise ValueError(self._held_message()) from None
        except OSError as err:
            raise ValueError(f"argument --output-dir: cannot create {self.path} "
                             f"({err.strerror})") from None
        with os.fdopen(fd, "w") as handle:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}, handle)
        self.held = True
        self.marked = not (self.out / RUN_MARKER).is_file()
        mark_run_dir(self.out)

    def _held_message(self) -> str:
        try:
            owner = json.loads(self.path.read_text())
            pid, host = int(owner["pid"]), str(owner["host"])
            started = str(owner.get("started", "?"))
        except (OSError, ValueError, KeyError, TypeError):
            return (f"argument --output-dir: {self.out} is in use by another setattn run "
                    f"(its lock {self.path} exists); wait for it to end or choose another "
                    f"directory")
        if host == socket.gethostname() and not _alive(pid):
            return (f"argument --output-dir: {self.out} has a stale lock: {self.path} was "
                    f"left by a run (pid {pid}, started {started}) that is no longer "
                    f"running (killed?); if no other run uses {self.out}, delete "
                    f"{self.path} and run the command again (--resume continues that run)")
        return (f"argument --output-dir: {self.out} is in use by another setattn run (pid "
                f"{pid} on {host}, started {started}); wait for it to end or choose another "
                f"directory")

    def release(self) -> None:
        """Remove the lock; the marker this claim wrote, where nothing else was
        written, and a directory this claim created, where it is then empty, go too (a
        refused run leaves nothing behind)."""
        if not self.held:
            return
        self.path.unlink(missing_ok=True)
        self.held = False
        if self.marked and [p.name for p in self.out.iterdir()] == [RUN_MARKER]:
            (self.out / RUN_MARKER).unlink(missing_ok=True)
        if self.created:
            try:
                self.out.rmdir()  # only if empty
            except OSError:
                pass


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
