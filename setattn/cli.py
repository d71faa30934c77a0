"""The ``setattn`` command: molecule property prediction from a CSV of SMILES.

    setattn train   --data CSV --target-columns T1 [T2 ...] --output-dir DIR [...]
    setattn predict --model DIR --data CSV --output preds.csv
    setattn explain --model DIR --smiles S --output FILE.png|.svg [--heads]

Bad input (a missing file or column, a non-numeric target, a foreign checkpoint, a
flag out of range) ends the command with exit status 2 and one message naming the
file, row, column or argument; an interrupted ``train`` (Ctrl-C) exits with 130 and
is continued by the same command with ``--resume``.

``train`` runs data-parallel when started by ``torchrun`` (see ``setattn.distributed``):

    torchrun --standalone --nproc_per_node 2 -m setattn.cli train --data CSV ...
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import multiprocessing
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import torch
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader

from setattn import distributed, splits
from setattn.capture import capture
from setattn.domains.molecules import InvalidSmilesError
from setattn.models.molecule import MoleculeModel, MoleculeModelConfig
from setattn.train import (
    CHECKPOINT_SECONDS,
    KERNEL_MAX_TRAIN,
    CheckpointError,
    RunConfig,
    TrainConfig,
    atomic_open,
    descriptor_count,
    featurize,
    load_run,
    run_training,
)

__all__ = ["build_parser", "explain_molecule", "main", "predict_csv"]

CHUNK_ROWS = 2_000
"""Rows of the input CSV read, featurised and predicted at a time by ``predict`` (by
one worker with ``--workers``). Peak RSS of a worker in benchmarks/predict_scale.py
(20,000 SMILES, 2 workers, this constant changed): 515 MB with 10,000-row chunks,
442 MB with 2,000; batches of 256 inside a chunk keep the speed."""


# ----------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------


DEFAULT_DESCRIPTORS = "rdkit"
"""Descriptor set unless ``--descriptors`` says otherwise: RDKit 2D descriptors lowered
FreeSolv test RMSE from 1.17 to 1.10 (mean of seeds 0-2, 60 epochs) in our measurements."""

DEFAULT_THREADS = 1
"""torch CPU threads unless ``--num-threads`` says otherwise. Molecule batches are small
(a few hundred atoms): on a 2-core machine one thread trained FreeSolv at 0.3-0.4 s
per epoch, two threads at 3-17 s per epoch whenever another process shared the cores."""


def build_parser() -> argparse.ArgumentParser:
    """The ``setattn`` argument parser with its three subcommands."""
    parser = argparse.ArgumentParser(
        prog="setattn", description="Molecule property prediction with attention over atoms.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    model_defaults = MoleculeModelConfig()
    train_defaults = TrainConfig()

    train = sub.add_parser("train", help="train a model (or an ensemble) on a CSV of SMILES",
                           description="Train on a CSV of SMILES and targets. Flags left out "
                           "take the defaults shown; with --resume they come from the run.")
    train.add_argument("--data", help="CSV file with a header line")
    train.add_argument("--smiles-column", help="SMILES column (default: smiles)")
    train.add_argument("--target-columns", nargs="+", metavar="T", help="target column(s)")
    train.add_argument("--task", choices=["regression", "classification"],
                       help="regression (default) or classification (binary tasks, 0/1 labels)")
    train.add_argument("--split", choices=list(splits.SPLITS), help="default: random")
    train.add_argument("--split-sizes", nargs=3, type=float, metavar=("TRAIN", "VAL", "TEST"),
                       help="fractions (default: 0.8 0.1 0.1)")
    train.add_argument("--seed", type=int, help="split seed; ensemble member k uses seed + k "
                       "for its initialisation and batch order (default: 0)")
    train.add_argument("--fold", type=int, help="test fold of --split kfold "
                       "(round(1 / test fraction) folds; default: 0)")
    train.add_argument("--epochs", type=int, help=f"default: {train_defaults.epochs}")
    train.add_argument("--output-dir", required=True, help="run directory to write")
    train.add_argument("--ensemble-size", type=int, help="models trained (default: 1)")
    train.add_argument("--resume", action="store_true",
                       help="continue the interrupted run in --output-dir")
    train.add_argument("--strict", action="store_true", default=None,
                       help="stop on an invalid or empty SMILES instead of skipping it")
    train.add_argument("--batch-size", type=int,
                       help=f"default: {train_defaults.batch_size}")
    train.add_argument("--lr", type=float,
                       help=f"peak learning rate (default: {train_defaults.lr})")
    train.add_argument("--weight-decay", type=float,
                       help=f"AdamW weight decay (default: {train_defaults.weight_decay})")
    train.add_argument("--patience", type=int, help="early stopping: epochs without a better "
                       f"validation metric (default: {train_defaults.patience})")
    train.add_argument("--hidden", type=int, help=f"default: {model_defaults.hidden}")
    train.add_argument("--layers", type=int, help=f"default: {model_defaults.layers}")
    train.add_argument("--heads", type=int, help=f"default: {model_defaults.heads}")
    train.add_argument("--dropout", type=float, help=f"default: {model_defaults.dropout}")
    train.add_argument("--descriptors", choices=["none", "rdkit"],
                       help="append RDKit 2D descriptors to the readout (default: "
                       f"{DEFAULT_DESCRIPTORS}; measured to help on FreeSolv)")
    train.add_argument("--kernel-ridge", choices=["auto", "off"],
                       help="average a kernel ridge regression on the descriptors with "
                       "the attention network's predictions (default: auto, for "
                       "regression with descriptors on at most "
                       f"{KERNEL_MAX_TRAIN} training molecules)")
    train.add_argument("--checkpoint-seconds", type=float, default=CHECKPOINT_SECONDS,
                       metavar="S", help="least training time between two writes of "
                       "last.pt, which --resume continues from; it is also written at the "
                       "end and on Ctrl-C or an error, so only a process killed outright "
                       "loses up to S seconds of training (default: "
                       f"{CHECKPOINT_SECONDS:g}; 0: after every epoch)")
    train.add_argument("--num-threads", type=int, default=DEFAULT_THREADS,
                       help=f"torch CPU threads (default: {DEFAULT_THREADS}; small molecule "
                       "batches rarely gain from more)")

    predict = sub.add_parser("predict", help="predict the targets of a CSV of SMILES",
                             description="One output row per input row, in order; an "
                             "unparsable SMILES gets empty predictions and a message in the "
                             "error column. An ensemble adds a <target>_std column per target.")
    predict.add_argument("--model", required=True, help="run directory (or one best.pt)")
    predict.add_argument("--data", required=True, help="CSV file with a header line")
    predict.add_argument("--output", required=True, help="CSV file to write")
    predict.add_argument("--smiles-column", help="default: the one the model was trained with")
    predict.add_argument("--num-threads", type=int, default=DEFAULT_THREADS)
    predict.add_argument("--workers", type=int, default=1,
                         help="processes featurising and predicting chunks in parallel "
                         "(default: 1, this process alone); the output is the same")

    explain = sub.add_parser("explain", help="draw which atoms the model's readout attended to")
    explain.add_argument("--model", required=True, help="run directory (or one best.pt)")
    explain.add_argument("--smiles", required=True, help="the molecule")
    explain.add_argument("--output", required=True, help="picture to write, .png or .svg")
    explain.add_argument("--heads", action="store_true",
                         help="one panel per attention head after the mean over heads")
    explain.add_argument("--num-threads", type=int, default=DEFAULT_THREADS)
    return parser


# Where each train flag lives in a RunConfig: "" the run itself, or its "train" or
# "model" settings. Used to build a run from flags and to compare flags on resume.
_RUN_FLAGS: dict[str, tuple[str, str]] = {
    "data": ("", "data"),
    "smiles_column": ("", "smiles_column"),
    "target_columns": ("", "target_columns"),
    "task": ("", "task"),
    "split": ("", "split"),
    "split_sizes": ("", "split_sizes"),
    "seed": ("", "seed"),
    "fold": ("", "fold"),
    "ensemble_size": ("", "ensemble_size"),
    "strict": ("", "strict"),
    "kernel_ridge": ("", "kernel_ridge"),
    "epochs": ("train", "epochs"),
    "batch_size": ("train", "batch_size"),
    "lr": ("train", "lr"),
    "weight_decay": ("train", "weight_decay"),
    "patience": ("train", "patience"),
    "hidden": ("model", "hidden"),
    "layers": ("model", "layers"),
    "heads": ("model", "heads"),
    "dropout": ("model", "dropout"),
}


def _section(run: RunConfig, section: str) -> object:
    return run if not section else run.train if section == "train" else run.model


def _flag_value(args: argparse.Namespace, name: str) -> object:
    value = getattr(args, name)
    return list(value) if isinstance(value, (list, tuple)) else value


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    """A new run from ``train`` flags, defaults where a flag is left out.

    Raises:
        ValueError: naming ``--data`` or ``--target-columns`` if missing.
    """
    for flag in ("data", "target_columns"):
        if getattr(args, flag) is None:
            raise ValueError(f"argument --{flag.replace('_', '-')} is required (unless --resume)")
    run = RunConfig(data=args.data, target_columns=list(args.target_columns))
    # the seed flag seeds the split and the models alike
    run.train.seed = args.seed if args.seed is not None else run.train.seed
    for name, (section, attribute) in _RUN_FLAGS.items():
        value = _flag_value(args, name)
        if value is not None:
            setattr(_section(run, section), attribute, value)
    descriptors = args.descriptors or DEFAULT_DESCRIPTORS
    run.model.descriptor_dim = descriptor_count() if descriptors == "rdkit" else 0
    run.model.num_tasks = len(run.target_columns)
    run.model.task = run.task
    return run


def resumed_run_config(args: argparse.Namespace, config_path: Path) -> RunConfig:
    """The run stored in ``config_path``; a flag given with another value is an error."""
    run = RunConfig.from_dict(json.loads(config_path.read_text()), str(config_path))
    for name, (section, attribute) in _RUN_FLAGS.items():
        value = _flag_value(args, name)
        if value is None:
            continue
        stored = getattr(_section(run, section), attribute)
        same = (Path(value).resolve() == Path(stored).resolve() if name == "data"
                else value == stored)
        if not same:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"argument {flag}: {value} differs from {stored} in {config_path}; "
                             f"--resume continues a run with the settings it started with")
    if args.descriptors is not None and (args.descriptors == "rdkit") != bool(
            run.model.descriptor_dim):
        raise ValueError(f"argument --descriptors: {args.descriptors} differs from the run in "
                         f"{config_path}")
    return run


# ----------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------


def cmd_train(args: argparse.Namespace) -> int:
    out = Path(args.output_dir)
    config_path = out / "config.json"
    if args.resume:
        if not config_path.is_file():
            raise FileNotFoundError(f"argument --resume: {out} holds no run to resume "
                                    f"(no config.json)")
        run = resumed_run_config(args, config_path)
    else:
        if config_path.is_file():
            raise ValueError(f"argument --output-dir: {out} already holds a run; pass --resume "
                             f"to continue it, or choose another directory")
        run = run_config_from_args(args)
    distributed.barrier()  # under torchrun: every rank has checked out/ before rank 0 writes
    metrics = run_training(run, out, resume=args.resume,
                           checkpoint_seconds=args.checkpoint_seconds)
    if not distributed.world().is_main:
        return 0
    test = metrics["test"]
    if run.task == "regression":
        summary = f"test RMSE {test['rmse']:.4f}  MAE {test['mae']:.4f}  R2 {test['r2']:.4f}"
    else:
        summary = f"test ROC-AUC {test['roc_auc']:.4f}  PR-AUC {test['pr_auc']:.4f}"
    print(f"{summary}  ({metrics['wall_time_s']:.1f} s; results in {out}/metrics.json)")
    return 0


# ----------------------------------------------------------------------------
# predict
# ----------------------------------------------------------------------------


def _read_chunks(reader: Iterator[list[str]], size: int, source: str
                 ) -> Iterator[list[list[str]]]:
    """Successive lists of at most ``size`` CSV records.

    Raises:
        ValueError: naming ``source`` and the line if the CSV module cannot read it.
    """
    chunk: list[list[str]] = []
    try:
        for record in reader:
            chunk.append(record)
            if len(chunk) == size:
                yield chunk
                chunk = []
    except csv.Error as err:
        raise ValueError(f"{source}: line {reader.line_num}: unreadable CSV ({err})") from None
    if chunk:
        yield chunk


@torch.no_grad()
def _predict_chunk(models: Sequence[MoleculeModel], smiles: Sequence[str], first_row: int,
                   source: str) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Predictions for one chunk of SMILES.

    Returns:
        mean (M, T) and std (M, T) over the models (NaN rows where the SMILES failed),
        and one error message per SMILES ("" when it parsed).
    """
    descriptor_dim = models[0].config.descriptor_dim
    num_tasks = models[0].config.num_tasks
    data, ok, errors = [], [], []
    for offset, text in enumerate(smiles):
        try:
            data.append(featurize(text, descriptor_dim, row=first_row + offset, source=source))
            ok.append(offset)
            errors.append("")
        except InvalidSmilesError as err:
            errors.append(f"invalid SMILES: {err.reason}")
    mean = torch.full((len(smiles), num_tasks), float("nan"))  # (M, T)
    std = torch.full((len(smiles), num_tasks), float("nan"))  # (M, T)
    if data:
        per_model = []
        for model in models:
            loader = DataLoader(data, batch_size=256, shuffle=False)
            per_model.append(torch.cat([model.predict(batch) for batch in loader]))
        stacked = torch.stack(per_model)  # (K, M_ok, T)
        index = torch.tensor(ok)
        mean[index] = stacked.mean(0)
        std[index] = stacked.std(0, correction=0)
    return mean, std, errors


# A chunk's work in a worker process: (first row, SMILES) -> (mean, std, errors).
# The models reach the workers by fork (set by _init_worker), not through a pipe.
_WORKER: dict = {}


def _init_worker(models: Sequence[MoleculeModel], source: str) -> None:
    torch.set_num_threads(1)
    _WORKER.update(models=models, source=source)


def _worker_chunk(task: tuple[int, list[str]]) -> tuple:
    first_row, smiles = task
    mean, std, errors = _predict_chunk(_WORKER["models"], smiles, first_row, _WORKER["source"])
    return mean.numpy(), std.numpy(), errors  # arrays travel back as plain bytes


def _predict_stream(models: Sequence[MoleculeModel], tasks: Iterable[tuple[int, list[str]]],
                    source: str, workers: int) -> Iterator[tuple[list[str], tuple]]:
    """(SMILES, ``_predict_chunk`` result) for each (first row, SMILES) task, in order.

    With ``workers`` > 1 a pool of forked processes works on up to 2 chunks each at
    a time; the next chunks are read only as results are written, so memory stays
    bounded whatever the input size. A worker that dies (killed, out of memory) ends
    the command with ``BrokenProcessPool`` instead of a wait forever.
    """
    if workers <= 1:
        for first_row, smiles in tasks:
            yield smiles, _predict_chunk(models, smiles, first_row, source)
        return
    # Forked workers share this process's memory until they write to it; freezing the
    # objects alive now keeps the workers' garbage collector from touching (and so
    # copying) every page of them (see the docs of gc.freeze).
    gc.freeze()
    try:
        with ProcessPoolExecutor(workers, multiprocessing.get_context("fork"), _init_worker,
                                 (models, source)) as pool:
            pending: deque = deque()
            for task in tasks:
                pending.append((task[1], pool.submit(_worker_chunk, task)))
                if len(pending) >= 2 * workers:
                    smiles, future = pending.popleft()
                    yield smiles, _from_worker(future.result())
            while pending:
                smiles, future = pending.popleft()
                yield smiles, _from_worker(future.result())
    finally:
        gc.unfreeze()


def _from_worker(result: tuple) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    mean, std, errors = result
    return torch.from_numpy(mean), torch.from_numpy(std), errors


def _cell(value: float) -> str:
    return "" if value != value else f"{value:.8g}"  # NaN -> empty cell


def predict_csv(models: Sequence[MoleculeModel], targets: Sequence[str], data: str | Path,
                output: str | Path, smiles_column: str, chunk_rows: int = CHUNK_ROWS,
                workers: int = 1) -> dict:
    """Stream ``data`` through the models into ``output``, ``chunk_rows`` rows at a time.

    The output has the columns ``smiles_column``, one per target, ``<target>_std``
    per target when there are several models, and ``error``; one row per input row,
    in order. It is written to a temporary file that replaces ``output`` at the end.
    Memory holds a few chunks at a time, whatever the size of ``data``.

    Args:
        workers: processes featurising and predicting chunks in parallel (1: this one);
            the output is the same for any number.

    Returns:
        ``{"rows": ..., "errors": ...}`` counts.

    Raises:
        FileNotFoundError: naming ``--data``.
        ValueError: if the SMILES column is missing (listing the columns present), or
            a line of ``data`` is not readable CSV (naming it).
    """
    data, output = Path(data), Path(output)
    if not data.is_file():
        raise FileNotFoundError(f"argument --data: no such file {str(data)!r}")
    header_out = [smiles_column, *targets]
    if len(models) > 1:
        header_out += [f"{t}_std" for t in targets]
    header_out.append("error")
    rows = errors = 0
    with open(data, encoding="utf-8", newline="") as src, \
            atomic_open(output, "w", encoding="utf-8", newline="") as dst:
        reader = csv.reader(src)
        try:
            header = next(reader, [])
        except csv.Error as err:
            raise ValueError(f"{data.name}: line 1: unreadable CSV header ({err})") from None
        if smiles_column not in header:
            raise ValueError(f"{data.name}: missing column {smiles_column!r}; columns "
                             f"present: {header}")
        col = header.index(smiles_column)
        writer = csv.writer(dst)
        writer.writerow(header_out)
        tasks = _chunk_tasks(_read_chunks(reader, chunk_rows, data.name), col)
        for smiles, (mean, std, messages) in _predict_stream(models, tasks, data.name, workers):
            for m, text in enumerate(smiles):
                cells = [text, *(_cell(v) for v in mean[m].tolist())]
                if len(models) > 1:
                    cells += [_cell(v) for v in std[m].tolist()]
                writer.writerow([*cells, messages[m]])
            rows += len(smiles)
            errors += sum(1 for message in messages if message)
    return {"rows": rows, "errors": errors}


def _chunk_tasks(chunks: Iterable[list[list[str]]], col: int) -> Iterator[tuple[int, list[str]]]:
    """(first data row, SMILES of the chunk) per chunk; a short record gives ""."""
    first_row = 0
    for chunk in chunks:
        yield first_row, [record[col] if col < len(record) else "" for record in chunk]
        first_row += len(chunk)


def cmd_predict(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ValueError(f"argument --workers: must be >= 1, got {args.workers}")
    models, meta = load_run(args.model)
    smiles_column = args.smiles_column or meta.get("smiles_column", "smiles")
    try:
        counts = predict_csv(models, meta["target_columns"], args.data, args.output,
                             smiles_column, workers=args.workers)
    except BrokenProcessPool:
        print(f"setattn predict: error: a --workers process died (killed, or out of memory); "
              f"{args.output} was not written", file=sys.stderr)
        return 1
    print(f"wrote {counts['rows']} rows to {args.output} ({len(models)} model(s); "
          f"{counts['errors']} invalid SMILES with empty predictions)")
    return 0


# ----------------------------------------------------------------------------
# explain
# ----------------------------------------------------------------------------


@torch.no_grad()
def explain_molecule(model: MoleculeModel, smiles: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The readout's attention over a molecule's atoms, and the prediction.

    Returns:
        weights (N, H): head h's attention weight of atom j (each column sums to 1),
        and the prediction (T,) in target units or probabilities.

    Raises:
        ValueError: naming ``--smiles`` if it does not parse.
    """
    try:
        data = featurize(smiles, model.config.descriptor_dim)
    except InvalidSmilesError as err:
        raise ValueError(f"argument --smiles: {err}") from None
    model.eval()
    batch = Batch.from_data_list([data])
    with capture() as captured:
        prediction = model.predict(batch)[0]  # (T,)
    pool = captured["pool"]
    atoms = pool.edge_index[0]  # (E,) source atom of each atom -> molecule edge
    weights = pool.weights.new_zeros(data.num_nodes, pool.weights.shape[1])  # (N, H)
    weights[atoms] = pool.weights
    return weights, prediction


def cmd_explain(args: argparse.Namespace) -> int:
    from setattn.viz import draw_atom_weights

    output = Path(args.output)
    if output.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"argument --output: {output} must end in .png or .svg")
    models, meta = load_run(args.model)
    weights, prediction = explain_molecule(models[0], args.smiles)  # (N, H), (T,)
    heads = weights.shape[1]
    panels = [weights.mean(1)]  # (N,) each
    legends = [f"readout attention, mean of {heads} heads"]
    if args.heads:
        panels += [weights[:, h] for h in range(heads)]
        legends += [f"head {h}" for h in range(heads)]
    draw_atom_weights(args.smiles, torch.stack(panels), output, legends=legends)
    values = ", ".join(f"{t} {v:.4g}" for t, v in zip(meta["target_columns"],
                                                        prediction.tolist()))
    which = f" (model_0 of an ensemble of {len(models)})" if len(models) > 1 else ""
    if models[0].kernel is not None:
        which += (f"; the prediction weighs the attention network {float(models[0].blend):g} "
                  "and the descriptor kernel ridge the rest, the picture is the network's")
    print(f"{args.smiles}: predicted {values}{which}; attention drawn in {output}")
    return 0


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``setattn`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.num_threads < 1:
        parser.error(f"argument --num-threads: must be >= 1, got {args.num_threads}")
    if args.command == "train" and not 0 <= args.checkpoint_seconds < float("inf"):
        parser.error(f"argument --checkpoint-seconds: must be >= 0 and finite, "
                     f"got {args.checkpoint_seconds}")
    torch.set_num_threads(args.num_threads)
    command = {"train": cmd_train, "predict": cmd_predict, "explain": cmd_explain}[args.command]
    try:
        if args.command == "train":  # one process group per run under torchrun
            with distributed.session():
                return command(args)
        return command(args)
    except (FileNotFoundError, CheckpointError, ValueError) as err:
        print(f"setattn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.command == "train":
            print(f"\nsetattn train: interrupted; the last finished epoch is saved. Continue "
                  f"with: setattn train --output-dir {args.output_dir} --resume",
                  file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
