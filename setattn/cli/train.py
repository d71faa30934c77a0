"""``setattn train``: a run from flags (or the stored run with ``--resume``), trained."""

from __future__ import annotations

import argparse
from pathlib import Path

from setattn.cli.parser import flag_name
from setattn.molprop import distributed
from setattn.molprop.checkpoint import check_run_dir
from setattn.molprop.config import RunConfig, config_section, new_run, resolve_device, run_flags
from setattn.molprop.run import run_training

__all__ = ["cmd_train", "resumed_run_config", "run_config_from_args"]


def _flag_value(args: argparse.Namespace, name: str) -> object:
    value = getattr(args, name)
    return list(value) if isinstance(value, (list, tuple)) else value


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    """A new run from ``train`` flags, defaults where a flag is left out: the mapping
    ``MoleculePredictor`` uses too (``setattn.molprop.config.new_run``).

    Raises:
        ValueError: naming ``--data`` or ``--target-columns`` if missing.
    """
    for flag in ("data", "target_columns"):
        if getattr(args, flag) is None:
            raise ValueError(f"argument {flag_name(flag)} is required (unless --resume)")
    return new_run({**{f.name: _flag_value(args, f.name) for _, f in run_flags()},
                    "descriptors": args.descriptors})


def resumed_run_config(args: argparse.Namespace, config_path: Path) -> RunConfig:
    """The run stored in ``config_path``; a flag given with another value is an error."""
    run = RunConfig.read(config_path)
    for section, f in run_flags():
        value = _flag_value(args, f.name)
        if value is None:
            continue
        stored = getattr(config_section(run, section), f.name)
        if f.name == "device":  # checkpoints hold CPU tensors: a run may go on elsewhere
            run.train.device = value
            continue
        same = (Path(value).resolve() == Path(stored).resolve() if f.name == "data"
                else value == stored)
        if not same:
            raise ValueError(f"argument {flag_name(f.name)}: {value} differs from {stored} in "
                             f"{config_path}; --resume continues a run with the settings it "
                             f"started with")
    if args.descriptors is not None and (args.descriptors == "rdkit") != bool(
            run.model.descriptor_dim):
        raise ValueError(f"argument --descriptors: {args.descriptors} differs from the run in "
                         f"{config_path}")
    return run


def cmd_train(args: argparse.Namespace) -> int:
    """Train; print the test metrics. Returns the exit status."""
    out = Path(args.output_dir)
    config_path = out / "config.json"
    if args.resume:
        if not config_path.is_file():
            raise FileNotFoundError(f"argument --resume: {out} holds no run to resume "
                                    f"(no config.json)")
        run = resumed_run_config(args, config_path)
    else:
        check_run_dir(out)  # new, empty or a run: nothing of the user's is replaced
        if config_path.is_file():
            raise ValueError(f"argument --output-dir: {out} already holds a run; pass --resume "
                             f"to continue it, or choose another directory")
        run = run_config_from_args(args)
        run.data = str(Path(run.data).resolve())  # --resume works from any directory
    # one process group per run under torchrun (NCCL on GPUs)
    with distributed.session(resolve_device(run.train.device)) as world:
        distributed.barrier()  # every rank has checked out/ before rank 0 writes
        metrics = run_training(run, out, resume=args.resume,
                               checkpoint_seconds=args.checkpoint_seconds)
    if not world.is_main:
        return 0
    test = metrics["test"]
    names = ({"rmse": "RMSE", "mae": "MAE", "r2": "R2"} if run.task == "regression"
             else {"roc_auc": "ROC-AUC", "pr_auc": "PR-AUC"})
    summary = "  ".join(f"{label} {_shown(test, key)}" for key, label in names.items())
    print(f"test {summary}  ({metrics['wall_time_s']:.1f} s; results in {out}/metrics.json)")
    return 0


def _shown(metrics: dict, key: str) -> str:
    """A metric's value, or "undefined (why)" when the test part cannot define it."""
    value = metrics[key]
    if value == value:  # not NaN
        return f"{value:.4f}"
    return f"undefined ({metrics.get(key + '_undefined', 'no value')})"
