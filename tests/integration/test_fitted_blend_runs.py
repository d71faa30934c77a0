"""The network's blend weight fitted per task on the validation part, in runs: a run
that started with the fixed weight (or before the option existed) resumes with it."""

from __future__ import annotations

import json

from molecule_runs import freesolv_slice, run_from_before, train_tiny

from setattn.molprop.checkpoint import load_run
from setattn.molprop.model import KERNEL_BLEND


def test_a_run_started_with_the_fixed_weight_resumes_with_it(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 30)
    out = tmp_path / "run"
    first = run_from_before(data, out, capsys, "--network-weight", "fixed", "network_weight",
                            "fitted_blend")
    status, stdout, _ = train_tiny(data, out, capsys, "--resume")
    assert status == 0 and "network weight in the blend" not in stdout
    (model,), _ = load_run(out)
    assert model.blend.shape == () and float(model.blend) == KERNEL_BLEND
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test"]["rmse"] == first and metrics["components"]["blend"] == KERNEL_BLEND


def test_the_fitted_weights_are_in_every_member_and_its_file(tmp_path, capsys):
    data = freesolv_slice(tmp_path / "fs.csv", 40)
    out = tmp_path / "run"
    status, stdout, _ = train_tiny(data, out, capsys, "--ensemble-size", "2")
    assert status == 0
    line = next(s for s in stdout.splitlines() if "network weight in the blend" in s)
    weight = float(line.rsplit(" ", 1)[1])
    models, _ = load_run(out)
    assert len(models) == 2
    for model in models:
        assert model.config.fitted_blend and model.blend.shape == (1,)
        assert abs(float(model.blend[0]) - weight) < 0.005  # the line rounds to 2 places
    assert models[0].blend.tolist() == models[1].blend.tolist()
    blend = json.loads((out / "metrics.json").read_text())["components"]["blend"]
    assert blend == models[0].blend.tolist()
