"""``setattn pretrain``: pretrain the networks' encoder on a CSV of unlabelled SMILES."""

from __future__ import annotations

import argparse
from dataclasses import fields

from setattn.molprop.config import SettingError
from setattn.molprop.pretrain import PretrainConfig, pretrain, read_config

__all__ = ["cmd_pretrain", "pretrain_config"]


def pretrain_config(args: argparse.Namespace) -> PretrainConfig | None:
    """The settings of the flags given, defaults for the rest; None with ``--resume``
    (the run's own settings, which the flags given must match).

    Raises:
        SettingError: naming ``corpus`` when a new pretraining has none, or a flag given
            with ``--resume`` that differs from the run's setting.
        FileNotFoundError: ``--resume`` where no pretraining was started.
    """
    given = {f.name: getattr(args, f.name) for f in fields(PretrainConfig)
             if getattr(args, f.name) is not None}
    if not args.resume:
        if "corpus" not in given:
            raise SettingError("corpus", "is required (unless a pretraining is resumed)")
        return PretrainConfig(**given)
    saved = read_config(args.output_dir)
    for name, value in given.items():
        if getattr(saved, name) != value:
            raise SettingError(name, f"is {value!r}, but the pretraining in "
                               f"{args.output_dir} has {getattr(saved, name)!r}; --resume "
                               f"continues it with its own settings")
    return None


def cmd_pretrain(args: argparse.Namespace) -> int:
    """Pretrain; print where the encoder is. Returns the exit status."""
    result = pretrain(pretrain_config(args), args.output_dir, resume=args.resume,
                      checkpoint_seconds=args.checkpoint_seconds)
    best = result.rows[result.best_epoch - 1]
    print(f"encoder of epoch {result.best_epoch} (held-out loss {best['held_out_loss']:.4f}) "
          f"in {result.encoder}; fine-tune it with setattn train --pretrained {result.encoder}")
    return 0
