"""Saved benchmark runs scored again with their kernel ridge fitted anew at today's grid.

A run's attention network does not depend on its kernel ridge (the members train on
their own outputs; the kernel ridge's fit draws from its own generator), so where only
the kernel ridge's defaults change, a saved run of ``benchmarks/molecules.py`` becomes
the run today's code would make by fitting the kernel ridge again. For every setattn
run folder under ``--runs`` this script reloads the ensemble, fits the kernel ridge on
the run's training part as ``setattn train`` does (``run.fit_kernel``), puts it into
every member, scores the validation and test parts as ``setattn train`` does
(``scoring.ensemble_scores``: metrics, 90 % intervals calibrated anew, the blend's
parts) and writes under ``--out`` the run folder (``config.json``, ``split.json``, the
members' ``best.pt`` with the new kernel ridge, ``metrics.json``; the data file beside
it) and its record in ``results.json``, as ``molecules.py`` writes them.

Timing fields are not measured again: a record's ``seconds`` and ``fit_seconds`` are
the saved run's, with the saved kernel ridge's fit seconds replaced by the new fit's
(``kernel_refit`` in the record holds both), and ``mol_per_s`` follows from them as
``molecules.py`` computes it. Runs without a kernel ridge are refused.

    python benchmarks/kernel_rescore.py --runs runs/report7_a_small --out runs/report9_small
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from molecule_jobs import load_results, record_key, save_result, setattn_result
from molecule_sets import SETS
from recalibrate import RunFiles, open_run, run_folders

from setattn.molprop.checkpoint import load_checkpoint, save_checkpoint
from setattn.molprop.featurize import featurize
from setattn.molprop.run import fit_kernel
from setattn.molprop.scoring import ensemble_scores


def part_data(run: RunFiles, rows: list[int]) -> list:
    """The molecules of a part (``Data`` with descriptors and (1, T) targets ``y``)."""
    dim = run.models[0].config.descriptor_dim
    data = []
    for i in rows:
        d = featurize(run.smiles[i], dim, row=i, source=str(run.data))
        d.y = torch.from_numpy(run.y[i:i + 1]).float()  # (1, T), as setattn train reads it
        data.append(d)
    return data


def rescored_metrics(run: RunFiles, folder: Path) -> dict:
    """The run's ``metrics.json`` with its kernel ridge fitted anew (put into
    ``run.models``) and every score that depends on it computed again."""
    old = run.metrics
    if "components" not in old:
        raise SystemExit(f"{folder}: the run has no kernel ridge to fit again")
    train, val, test = (part_data(run, run.split[p]) for p in ("train", "val", "test"))
    config = run.models[0].config
    kernel, info = fit_kernel(train, config, old["targets"])
    for model in run.models:
        model.kernel.load_state_dict(kernel.state_dict())
    scores = ensemble_scores(run.models, val, test, old["task"], old["targets"], info)
    metrics = {**old, "test": scores["test"], "val": scores["val"],
               "models": [{**m, "test": t} for m, t in zip(old["models"], scores["member_test"],
                                                           strict=True)],
               "components": scores["components"]}
    if "uncertainty" in scores:
        metrics["uncertainty"] = scores["uncertainty"]
    before = old["components"]["kernel"]["seconds"]
    metrics["train_seconds"] = old["train_seconds"] - before + info["seconds"]
    return metrics


def copy_run(folder: Path, target: Path, data: Path, metrics: dict) -> None:
    """The run folder at ``target``: the saved one's files as they are (configuration,
    split, each member's ``best.pt``), its data file beside it, the new ``metrics.json``."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "split.json"):
        shutil.copyfile(folder / name, target / name)
    for member in sorted(folder.glob("model_*/best.pt")):
        (target / member.parent.name).mkdir(exist_ok=True)
        shutil.copyfile(member, target / member.parent.name / "best.pt")
    if not (target.parent.parent / data.name).exists():
        shutil.copyfile(data, target.parent.parent / data.name)
    (target / "metrics.json").write_text(json.dumps(metrics, indent=1))


def write_run(run: RunFiles, folder: Path, target: Path, metrics: dict) -> None:
    """The rescored run folder at ``target``: the saved one (``copy_run``) with each
    member's ``best.pt`` holding the run's new kernel ridge."""
    copy_run(folder, target, run.data, metrics)
    for k, model in enumerate(run.models):
        ckpt = load_checkpoint(folder / f"model_{k}" / "best.pt", "model")
        ckpt["state_dict"].update({f"kernel.{key}": value
                                   for key, value in model.kernel.state_dict().items()})
        ckpt.pop("setattn_format", None)
        save_checkpoint(ckpt, target / f"model_{k}" / "best.pt")


def saved_record(folder: Path, run: RunFiles) -> dict:
    """The one setattn record of the run folder in its benchmark's ``results.json``;
    SystemExit naming the folder where there is none or more than one."""
    root = folder.parent.parent.parent
    saved = [r for r in load_results(root)
             if (r["dataset"], r["split"], r["seed"], r["tool"])
             == (folder.parent.parent.name, run.kind, run.seed, "setattn")]
    if len(saved) != 1:
        raise SystemExit(f"{folder}: {len(saved)} setattn records of it in "
                         f"{root / 'results.json'}, not 1")
    return saved[0]


def rescore(folder: Path, out: Path) -> dict:
    """Fit one saved run's kernel ridge again, write its folder under ``out`` and return
    its record (the saved record's fields, the scores and times changed)."""
    run = open_run(folder)
    metrics = rescored_metrics(run, folder)
    dataset, column = folder.parent.parent.name, folder.parent.name
    target = out / dataset / column / "setattn"
    write_run(run, folder, target, metrics)
    record = saved_record(folder, run)
    result = setattn_result(metrics, target, SETS[dataset].metric)
    before = run.metrics["components"]["kernel"]["seconds"]
    after = metrics["components"]["kernel"]["seconds"]
    result["seconds"] = record["result"]["seconds"] - before + after
    result["mol_per_s"] = record["train"] * result["epochs"] / result["fit_seconds"]
    return {**record, "result": result,
            "kernel_refit": {"from": str(folder), "seconds_before": before,
                             "seconds_after": after,
                             "choice": metrics["components"]["kernel"]}}


def rescore_args(argv: list[str] | None, doc: str, runs: str) -> argparse.Namespace:
    """The command line of a script that scores saved runs again (``--runs``, ``--out``,
    ``--threads``, which it also sets)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--runs", nargs="+", type=Path, required=True, help=runs)
    parser.add_argument("--out", type=Path, required=True,
                        help="where the rescored run folders and results.json go")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    return args


def keep(out: Path, done: set, folder: Path, record: dict) -> None:
    """Save a rescored run's record in ``out``'s results.json at once (nothing computed is
    lost), saying so where it replaces one of the keys in ``done``."""
    if record_key(record) in done:
        print(f"{folder}: already in {out / 'results.json'}, replaced")
    save_result(out, record)


def main(argv: list[str] | None = None) -> None:
    args = rescore_args(argv, __doc__,
                        "molecules.py --out folders holding saved runs with a kernel ridge")
    done = {record_key(r) for r in load_results(args.out)}
    for folder in run_folders(args.runs):
        record = rescore(folder, args.out)
        keep(args.out, done, folder, record)
        r = record["result"]
        print(f"{folder}: {SETS[record['dataset']].metric} {r['metric']:.4f} (network "
              f"{r['network']:.4f}, kernel ridge {r['kernel']:.4f}; "
              f"{record['kernel_refit']['choice']['kernel']} "
              f"{record['kernel_refit']['choice']['gamma']:g} / "
              f"{record['kernel_refit']['choice']['ridge']:g})", flush=True)


if __name__ == "__main__":
    main()
