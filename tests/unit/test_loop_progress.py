"""``Progress.to_dict``: what ``last.pt`` stores of where training stands."""

from __future__ import annotations

from dataclasses import asdict

from setattn.molprop.loop import Progress


def test_to_dict_equals_asdict_and_round_trips():
    rows = [{"model": 0, "epoch": e, "val_rmse": 1.0 / e} for e in (1, 2, 3)]
    progress = Progress("rmse", epoch=3, best_epoch=3, best_value=1 / 3, bad_epochs=0,
                        finished=False, rows=rows, seconds=2.5)
    state = progress.to_dict()
    assert state == asdict(progress)
    assert Progress(**state) == progress


def test_to_dict_does_not_freeze_later_epochs_into_an_earlier_state():
    progress = Progress("rmse", rows=[{"epoch": 1}])
    state = progress.to_dict()
    progress.rows = [*progress.rows, {"epoch": 2}]  # how an epoch adds its row
    progress.epoch = 2
    assert state["rows"] == [{"epoch": 1}] and state["epoch"] == 0
