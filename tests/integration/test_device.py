"""``--device``, ``--precision`` and ``--compile``: the CPU gives today's numbers whether
asked for or chosen by ``auto``; CUDA asked for where there is none is an error naming the
flag; bf16 autocast covers the training forward passes only; a compiled run trains the
same model as an eager one. (No GPU here: what runs on CUDA is
checked on a machine with one.)"""

from __future__ import annotations

import json

import pytest
import torch
from molecule_runs import freesolv_slice, read_csv, run, train_tiny

from setattn.cli import predict as cli_predict
from setattn.molprop import checkpoint, config
from setattn.molprop.config import TrainConfig

TIMES = ("wall_time_s", "train_seconds")


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _metrics(out):
    metrics = json.loads((out / "metrics.json").read_text())
    metrics.pop("components")["kernel"].pop("seconds")  # timing, not a result
    return {k: v for k, v in metrics.items() if k not in TIMES}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return freesolv_slice(tmp_path_factory.mktemp("data") / "freesolv.csv", 50)


def test_cpu_and_auto_give_the_numbers_of_a_run_without_the_flag(data, tmp_path, capsys):
    outputs = {}
    for name, flags in (("none", []), ("cpu", ["--device", "cpu"]),
                        ("auto", ["--device", "auto"])):
        out = tmp_path / name
        assert train_tiny(data, out, capsys, *flags, epochs=2)[0] == 0
        status, _, _ = run(["predict", "--model", out, "--data", data,
                            "--output", out / "preds.csv", *flags], capsys)
        assert status == 0
        outputs[name] = (_metrics(out), (out / "preds.csv").read_bytes(),
                         (out / "log.csv").read_text().splitlines())
    assert json.loads((tmp_path / "cpu" / "config.json").read_text())["train"]["device"] == "cpu"
    for name in ("cpu", "auto"):
        assert outputs[name][0] == outputs["none"][0]  # metrics.json, exactly
        assert outputs[name][1] == outputs["none"][1]  # predictions, byte for byte
        # epoch log rows but the seconds column
        assert [r.rsplit(",", 1)[0] for r in outputs[name][2]] == \
            [r.rsplit(",", 1)[0] for r in outputs["none"][2]]


@pytest.mark.parametrize("command", ["train", "predict", "explain"])
def test_cuda_without_cuda_is_an_error_naming_the_flag(command, data, tmp_path, capsys,
                                                       monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "run"
    argv = {"train": ["train", "--data", data, "--target-columns", "expt", "--output-dir", out],
            "predict": ["predict", "--model", out, "--data", data, "--output", out / "p.csv"],
            "explain": ["explain", "--model", out, "--smiles", "CCO", "--output", out / "e.png"]}
    status, stdout, stderr = run([*argv[command], "--device", "cuda:0"], capsys)
    assert status == 2 and stdout == ""
    assert stderr.startswith(f"setattn {command}: error: argument --device: cuda:0 asked for")
    assert len(stderr.strip().splitlines()) == 1 and not out.exists()


def test_device_values():
    assert config.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="^device must be auto, cpu, cuda or cuda:N"):
        config.resolve_device("gpu:0")
    with pytest.raises(ValueError, match="^device must be"):
        config.resolve_device("cuda:")


def test_auto_and_cuda_indices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert config.resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert config.resolve_device("auto") == torch.device("cuda", 0)
    assert config.resolve_device("cuda:1") == torch.device("cuda", 1)
    monkeypatch.setenv("LOCAL_RANK", "1")  # torchrun's second process on this machine
    assert config.resolve_device("cuda") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="cuda:2: there are only 2 CUDA device"):
        config.resolve_device("cuda:2")


def test_workers_need_the_cpu(data, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli_predict, "resolve_device", lambda spec: torch.device("cuda", 0))
    status, _, stderr = run(["predict", "--model", tmp_path, "--data", data, "--output",
                             tmp_path / "p.csv", "--workers", "2", "--device", "cuda"], capsys)
    assert status == 2 and "argument --workers: 2 worker processes need --device cpu" in stderr


def _linear_dtypes(data, out, capsys, *flags):
    """Output dtypes of every Linear layer call during a tiny run, by train / eval mode."""
    seen = {True: set(), False: set()}

    def hook(module, args, output):
        if isinstance(module, torch.nn.Linear):
            seen[module.training].add(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        assert train_tiny(data, out, capsys, *flags, epochs=2)[0] == 0
    finally:
        handle.remove()
    return seen


def test_bf16_autocasts_training_forward_passes_only(data, tmp_path, capsys):
    bf16 = _linear_dtypes(data, tmp_path / "bf16", capsys, "--precision", "bf16")
    # the embedding and the head in bfloat16; the attention layers' projections stay
    # float32 (setattn.molprop.network._float32)
    assert bf16[True] == {torch.bfloat16, torch.float32}
    assert bf16[False] == {torch.float32}  # validation and test: float32
    fp32 = _linear_dtypes(data, tmp_path / "fp32", capsys)
    assert fp32 == {True: {torch.float32}, False: {torch.float32}}
    state = checkpoint.load_network(tmp_path / "bf16" / "model_0" / "best.pt")[0].state_dict()
    assert {t.dtype for t in state.values() if t.is_floating_point()} <= {torch.float32,
                                                                          torch.float64}
    test = json.loads((tmp_path / "bf16" / "metrics.json").read_text())["test"]
    assert all(v == v for v in test.values())  # not NaN
    with pytest.raises(ValueError, match="^precision must be fp32 or bf16"):
        TrainConfig(precision="fp16").validate()  # the API's route; argparse checks the flag


def test_resume_may_name_another_device(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert train_tiny(data, out, capsys, epochs=2)[0] == 0
    before = _metrics(out)
    status, _, _ = run(["train", "--output-dir", out, "--resume", "--device", "cpu"], capsys)
    assert status == 0 and _metrics(out) == before
    assert json.loads((out / "config.json").read_text())["train"]["device"] == "cpu"
    status, _, stderr = run(["train", "--output-dir", out, "--resume", "--lr", "0.5"], capsys)
    assert status == 2 and "--lr: 0.5 differs" in stderr  # other settings still may not


def test_cpu_payloads_are_saved_as_given():
    state = {"w": torch.ones(2), "rng": [torch.zeros(3, dtype=torch.uint8), 4], "n": "x"}
    assert checkpoint.on_cpu(state) is state
    assert checkpoint.on_cpu(state["rng"]) is state["rng"]


def _val_losses(out):
    """The validation loss of every epoch, from ``log.csv``."""
    return [float(row["val_loss"]) for row in read_csv(out / "log.csv")]


def test_compile_trains_the_same_model(data, tmp_path, capsys, monkeypatch):
    """``--compile`` runs the training steps through ``torch.compile``: the same model
    and numbers as eager training up to float rounding (fused kernels add in another
    order), and the saved weights load as a plain model."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    calls = []
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda *a, **k: calls.append(k) or compile_(*a, **k))
    for name, flags in (("eager", []), ("compiled", ["--compile"])):
        assert train_tiny(data, tmp_path / name, capsys, *flags, epochs=2)[0] == 0
    assert calls == [{"dynamic": True}]  # the one model of the compiled run, not the eager
    eager, compiled = _val_losses(tmp_path / "eager"), _val_losses(tmp_path / "compiled")
    assert len(eager) == len(compiled) == 2
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)
    config = json.loads((tmp_path / "compiled" / "config.json").read_text())["train"]
    assert config["compile"] is True
    state = checkpoint.load_network(tmp_path / "compiled" / "model_0" / "best.pt")[0].state_dict()
    assert not any(k.startswith("_orig_mod") for k in state)  # the plain model's weights
