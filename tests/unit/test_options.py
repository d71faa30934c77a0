"""Settings and flags: one range check, worded by keyword in the library and by flag on the
command line; ``predict`` and ``explain`` flags made from dataclass fields as ``train``'s
are, with the names, defaults and help texts of the command line."""

from __future__ import annotations

import argparse
import math

import pytest

from setattn import cli
from setattn.cli.flags import ExplainFlags, PredictFlags, TrainFlags
from setattn.molprop.api import MoleculePredictor
from setattn.molprop.config import (
    NetworkConfig,
    Range,
    RunConfig,
    SettingError,
    TrainConfig,
    check_ranges,
    flag_fields,
    key_error,
    range_error,
)

DEVICE_HELP = ("where the model runs: auto (CUDA when available, else the CPU), cpu, cuda "
               "or cuda:N (default: auto)")
THREADS = ("--num-threads", 1, False, None, None,
           "torch CPU threads (default: 1; small molecule batches rarely gain from more)")

# (flag, default, required, metavar, choices, help) of each flag, as the command line has them
PREDICT = [
    ("--model", None, True, None, None, "run directory (or one best.pt)"),
    ("--data", None, True, None, None, "CSV file with a header line"),
    ("--output", None, True, None, None, "CSV file to write"),
    ("--smiles-column", None, False, None, None, "default: the one the model was trained with"),
    ("--encoding", None, False, None, None, "text encoding of the CSV, e.g. latin-1 or cp1252 "
     "(default: UTF-8, or UTF-16 with its byte-order mark)"),
    ("--max-heavy-atoms", None, False, "N", None, "molecules with more heavy atoms get no "
     "prediction (default: the run's setting, 300 unless it set another)"),
    ("--workers", None, False, None, None, "processes featurising and predicting in "
     "parallel (default: the cores free now, the usable cores less the 1-minute load "
     "average; 1 with a GPU); the output is the same"),
    ("--device", "auto", False, "DEVICE", None, DEVICE_HELP),
    THREADS,
]
EXPLAIN = [
    ("--model", None, True, None, None, "run directory (or one best.pt)"),
    ("--smiles", None, False, None, None, "one molecule: --output is its picture"),
    ("--data", None, False, None, None, "a CSV of molecules: --output is a folder"),
    ("--smiles-column", None, False, None, None, "with --data; default: the one the model was "
     "trained with"),
    ("--output", None, True, None, None, "picture (.png or .svg) for --smiles, folder for "
     "--data"),
    ("--method", "integrated-gradients", False, None,
     ["occlusion", "integrated-gradients", "readout", "attention"],
     "how contributions are measured (default: integrated-gradients, the best on "
     "benchmarks/attribution.py's validation molecules)"),
    ("--target", None, False, None, None, "the target explained (default: the first)"),
    ("--max-pictures", 50, False, None, None, "with --data: pictures of the first N molecules "
     "(default: 50)"),
    ("--device", "auto", False, "DEVICE", None, DEVICE_HELP + "; explanations run on the CPU, "
     "so auto means cpu here"),
    THREADS,
]


def _command(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in cli.build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _flags(parser: argparse.ArgumentParser) -> list[tuple]:
    return [(a.option_strings[0], a.default, a.required, a.metavar, a.choices, a.help)
            for a in parser._actions if a.dest != "help"]


@pytest.mark.parametrize("name, dataclass, expected", [
    ("predict", PredictFlags, PREDICT), ("explain", ExplainFlags, EXPLAIN)])
def test_predict_and_explain_flags_come_from_their_fields(name, dataclass, expected):
    parser = _command(name)
    assert _flags(parser) == expected
    assert [f.name for f in flag_fields(dataclass)] == [a.dest for a in parser._actions
                                                        if a.dest != "help"]


def test_explain_takes_exactly_one_of_smiles_and_data(capsys):
    (group,) = _command("explain")._mutually_exclusive_groups
    assert group.required and [a.dest for a in group._group_actions] == ["smiles", "data"]
    with pytest.raises(SystemExit) as info:
        cli.main(["explain", "--model", "m", "--smiles", "C", "--data", "d.csv", "--output", "o"])
    assert info.value.code == 2
    assert "argument --data: not allowed with argument --smiles" in capsys.readouterr().err


@pytest.mark.parametrize("name, expected", [("predict", PREDICT), ("explain", EXPLAIN)])
def test_help_lists_every_flag(capsys, name, expected):
    with pytest.raises(SystemExit) as info:
        cli.main([name, "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert [flag for flag, *_ in expected if flag in out] == [flag for flag, *_ in expected]


def test_flags_read_their_types_and_defaults():
    args = cli.build_parser().parse_args(["predict", "--model", "m", "--data", "d", "--output",
                                          "o", "--workers", "3", "--max-heavy-atoms", "40"])
    assert (args.workers, args.max_heavy_atoms, args.num_threads, args.device) == (3, 40, 1,
                                                                                   "auto")
    args = cli.build_parser().parse_args(["train", "--output-dir", "r", "--lr", "0.01"])
    assert args.lr == 0.01 and args.epochs is None  # left out: the default, or the run's
    assert args.checkpoint_seconds == 10.0 and args.resume is False
    assert [f.name for f in flag_fields(TrainFlags)] == [
        "output_dir", "resume", "descriptors", "checkpoint_seconds", "num_threads"]


@pytest.mark.parametrize("value, allowed, reason", [
    (0, Range(1), "must be >= 1, got 0"),
    (-1, Range(0), "must be >= 0, got -1"),
    (0.0, Range(0, low_open=True, finite=True), "must be > 0 and finite, got 0.0"),
    (math.inf, Range(0, low_open=True, finite=True), "must be > 0 and finite, got inf"),
    (math.nan, Range(0, finite=True), "must be >= 0 and finite, got nan"),
    (1.0, Range(0, below=1), "must be >= 0 and < 1, got 1.0"),
    (9000, Range(1, largest=8192), "must be <= 8,192 (the largest setattn accepts), got 9000"),
])
def test_range_error_says_what_is_accepted(value, allowed, reason):
    assert range_error(value, allowed) == reason


@pytest.mark.parametrize("value, allowed", [
    (1, Range(1)), (None, Range(1)), (0.5, Range(0, below=1)), (8192, Range(1, largest=8192)),
    (1e-9, Range(0, low_open=True, finite=True))])
def test_range_error_accepts_values_inside(value, allowed):
    assert range_error(value, allowed) is None


@pytest.mark.parametrize("make, message", [
    (lambda: MoleculePredictor(epochs=-1).check(), "epochs must be >= 1, got -1"),
    (lambda: MoleculePredictor(lr=0.0).check(), "lr must be > 0 and finite, got 0.0"),
    (lambda: MoleculePredictor(hidden=9000).check(),
     "hidden must be <= 8,192 (the largest setattn accepts), got 9000"),
    (lambda: TrainConfig(patience=0).validate(), "patience must be >= 1, got 0"),
    (lambda: RunConfig(data="x.csv", target_columns=["y"], ensemble_size=0).validate(),
     "ensemble_size must be >= 1, got 0"),
    (lambda: NetworkConfig(dropout=1.0).validate(), "dropout must be >= 0 and < 1, got 1.0"),
    (lambda: NetworkConfig(num_tasks=0).validate(), "num_tasks must be >= 1, got 0"),
])
def test_the_library_names_the_keyword(make, message):
    with pytest.raises(SettingError) as info:
        make()
    assert str(info.value) == message and "argument" not in str(info.value)


@pytest.mark.parametrize("argv, message", [
    (["train", "--output-dir", "r", "--epochs", "-1"], "argument --epochs: must be >= 1, got -1"),
    (["train", "--output-dir", "r", "--dropout", "1"],
     "argument --dropout: must be >= 0 and < 1, got 1.0"),
    (["train", "--output-dir", "r", "--checkpoint-seconds", "inf"],
     "argument --checkpoint-seconds: must be >= 0 and finite, got inf"),
    (["train", "--output-dir", "r", "--epochs", "x"], "argument --epochs: invalid int value: 'x'"),
    (["predict", "--model", "m", "--data", "d", "--output", "o", "--workers", "0"],
     "argument --workers: must be >= 1, got 0"),
    (["predict", "--model", "m", "--data", "d", "--output", "o", "--num-threads", "0"],
     "argument --num-threads: must be >= 1, got 0"),
    (["explain", "--model", "m", "--smiles", "C", "--output", "o.png", "--max-pictures", "-1"],
     "argument --max-pictures: must be >= 0, got -1"),
])
def test_the_command_line_names_the_flag(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"setattn {argv[0]}: error: {message}\n" in err


def test_a_setting_error_inside_a_command_names_the_flag(capsys, monkeypatch):
    def refuse(args):
        raise SettingError("batch_size", "must be >= 1, got 0")

    monkeypatch.setattr(cli, "cmd_predict", refuse)
    monkeypatch.setattr(cli.process, "set_up", lambda command, threads: None)
    status = cli.main(["predict", "--model", "m", "--data", "d", "--output", "o"])
    assert status == 2
    assert capsys.readouterr().err == ("setattn predict: error: argument --batch-size: must be "
                                       ">= 1, got 0\n")


def test_check_ranges_and_key_error_name_the_file_key():
    config = TrainConfig(epochs=0)
    with pytest.raises(SettingError) as info:
        check_ranges(config)
    assert (info.value.name, info.value.reason) == ("epochs", "must be >= 1, got 0")
    err = key_error(info.value, "config.json", {"epochs": "train."})
    assert str(err) == "config.json: key 'train.epochs': must be >= 1, got 0"
    check_ranges(TrainConfig(batch_size=None))  # None: not set, accepted
