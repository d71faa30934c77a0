"""Bounds on what a molecule run may ask for: molecule sizes, featurisation time, model
sizes, and the memory a training run needs against the memory the machine has.

- ``MAX_HEAVY_ATOMS`` and ``FEATURIZE_SECONDS``: molecules above the size limit, or
  whose featurisation runs past the time budget, are skipped and reported like invalid
  SMILES (RDKit's ``AvgIpc`` descriptor alone takes about 6 s on a 300-atom chain and
  grows as N^4, so without a size limit one long chain holds up a whole data set).
- ``MODEL_BOUNDS`` and ``RUN_BOUNDS``: the largest model and run sizes accepted from
  flags, ``config.json`` files and checkpoints, the ``largest`` of the config fields'
  ranges (``setattn.molprop.options.Range``), checked before anything is allocated (a
  checkpoint claiming a width of 12,000 is refused by its config, not after gigabytes of
  allocation).
- ``kernel_size``: whether a run's kernel ridge is fitted, within ``KERNEL_MAX_TRAIN``
  training molecules and the memory its fit needs.
- ``training_memory`` / ``check_memory``: a simple estimate of the memory a training run
  needs (parameters, gradients and AdamW state of the model in training, the weights of
  the ensemble members kept, and a batch's activations) compared with the memory the
  machine has available (``/proc/meminfo``'s MemAvailable, or ``os.sysconf``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from setattn.molprop.options import SettingError

__all__ = ["FEATURIZE_SECONDS", "MAX_HEAVY_ATOMS", "MODEL_BOUNDS", "RUN_BOUNDS",
           "TYPICAL_ATOMS", "MemoryEstimate", "available_memory", "check_memory",
           "parameter_count", "training_memory"]

MAX_HEAVY_ATOMS = 300
"""Default ``--max-heavy-atoms``: molecules with more heavy atoms are skipped."""

FEATURIZE_SECONDS = 30.0
"""Time budget per molecule for its featurisation (checked between descriptors): a
300-atom chain, the slowest molecule the default size limit lets through, takes about
7 s on one core."""

MODEL_BOUNDS = {"hidden": 8192, "heads": 1024, "layers": 64, "num_tasks": 100_000,
                "descriptor_dim": 100_000, "atom_dim": 4096, "bond_dim": 1024,
                "kernel_size": 100_000, "max_hops": 1024}
"""The largest value of each size of a ``NetworkConfig``."""

RUN_BOUNDS = {"ensemble_size": 1000, "batch_size": 10_000_000, "epochs": 1_000_000,
              "max_heavy_atoms": 100_000}
"""The largest value of each size of a run (``RunConfig`` or ``TrainConfig``)."""

TYPICAL_ATOMS = 30
"""Heavy atoms per molecule the memory estimate assumes before the data is read."""

_ACTIVATIONS_PER_LAYER = 18  # (N, D) floats one attention layer keeps for backward
_ACTIVATIONS_OTHER = 6  # embedding, pooling, head


def parameter_count(hidden: int, layers: int, *, num_tasks: int = 1,
                    descriptor_dim: int = 0, atom_dim: int = 59, bond_dim: int = 14,
                    layer_norm: bool = False, global_layers: int = 0,
                    heads: int = 4, max_hops: int = 8) -> int:
    """Parameters and buffers of a ``MoleculeNetwork`` (GATv2 layers; GAT has fewer),
    counted with Python integers, so absurd sizes give a number rather than an error."""
    d = hidden
    # two LayerNorms, four attention projections, a 2 D feed-forward, the distance biases
    block = 4 * d + 4 * (d * d + d) + 4 * d * d + 3 * d + (max_hops + 2) * heads
    conv = 2 * (d * d + d) + d + d + d * (bond_dim + 1) + (2 * d if layer_norm else 0)
    head = d * (2 * d + descriptor_dim) + d + num_tasks * d + num_tasks
    buffers = 2 * num_tasks + 2 * descriptor_dim  # target and descriptor scaling
    return (d * atom_dim + d + layers * conv + global_layers * block + (d + d * d + d) + head
            + buffers)


@dataclass
class MemoryEstimate:
    """Bytes a training run needs, by part."""

    parameters: int
    training: int
    kept_models: int
    activations: int

    @property
    def total(self) -> int:
        return self.training + self.kept_models + self.activations


def training_memory(hidden: int, heads: int, layers: int, batch_size: int,
                    ensemble_size: int, *, atoms_per_batch: int | None = None,
                    **sizes: int) -> MemoryEstimate:
    """Estimate the memory of training ``ensemble_size`` models one after the other.

    The model in training holds 4 float32 copies of its parameters (weights, gradients,
    AdamW's two moments); each finished member's weights stay in memory; a batch keeps
    about ``18 * layers + 6`` (N, D) float32 activations for the backward pass, E
    attention edges per atom (H, for the heads) included; a global attention block keeps
    as many, and H weights per pair of atoms of a molecule.

    Args:
        hidden, heads, layers: the model's D, H and L.
        batch_size: molecules per batch.
        ensemble_size: K.
        atoms_per_batch: N, heavy atoms of the largest batch (default: ``batch_size *
            TYPICAL_ATOMS``).
        sizes: further ``parameter_count`` arguments (num_tasks, descriptor_dim, ...).
    """
    n = atoms_per_batch if atoms_per_batch is not None else batch_size * TYPICAL_ATOMS
    params = parameter_count(hidden, layers, heads=heads, **sizes)
    global_layers = sizes.get("global_layers", 0)
    pairs = -(-n // max(batch_size, 1))  # atoms per molecule, rounded up: pairs per atom
    activations = 4 * n * (hidden * (_ACTIVATIONS_PER_LAYER * (layers + global_layers)
                                     + _ACTIVATIONS_OTHER)
                           + 3 * heads * layers + 4 * heads * pairs * global_layers)
    return MemoryEstimate(params, 4 * 4 * params, 4 * params * ensemble_size, activations)


def available_memory() -> int | None:
    """Bytes of memory available to this process now: MemAvailable of /proc/meminfo
    (else ``os.sysconf``), lowered to a cgroup's limit when one is set; None if unknown."""
    amount = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                amount = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if amount is None:
        try:
            amount = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    return min(amount, _cgroup_room() or amount)


def _cgroup_room() -> int | None:
    """Bytes left under a cgroup v2 memory limit, or None without one."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - used, 0)


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


KERNEL_MAX_TRAIN = 20000
"""Most training molecules the kernel ridge is fitted on (``--kernel-ridge``: auto skips
it above, on refuses). Its closed-form fit grows as M^3 in time and M^2 in memory."""

KERNEL_MATRICES = 7
"""(M, M) float64 matrices at the peak of the kernel ridge's fit: distances, one gamma's
kernel and its labelled copy, the eigendecomposition's input, output and workspace, the
squared eigenvectors (measured: 480 MB above the process at M = 3,000, 6.7 of them)."""


def kernel_memory(m: int) -> int:
    """Bytes the kernel ridge's fit on M training molecules needs at its peak."""
    return KERNEL_MATRICES * 8 * m * m


def kernel_memory_obstacle(m: int, available: int | None = None) -> str | None:
    """Why the kernel ridge's fit on M training molecules would not fit in memory, or None.

    Args:
        available: bytes available (default: ``available_memory()``; None: unknown).
    """
    available = available_memory() if available is None else available
    need = kernel_memory(m)
    if available is not None and need > available:
        return (f"its fit on {m:,} training molecules needs about {_gb(need)} of memory "
                f"but {_gb(available)} is available")
    return None


def kernel_size(choice: str, m: int, usable: bool, available: int | None = None
                ) -> tuple[int, str | None]:
    """M of a run's kernel ridge (0: none), and a note where auto skips it.

    Args:
        choice: ``--kernel-ridge``: "auto", "on" or "off".
        m: training molecules.
        usable: whether the run can have one: it has descriptors (the run's config
            refuses "on" without them; the caller has already left out what "auto"
            skips by task, several classification tasks).
        available: bytes available (default: ``available_memory()``; None: unknown).

    Raises:
        ValueError: naming ``--kernel-ridge`` when "on" meets more than
            ``KERNEL_MAX_TRAIN`` training molecules or a fit that would not fit in memory.
    """
    if choice == "off" or not usable:
        return 0, None
    obstacle = (f"it is fitted on at most {KERNEL_MAX_TRAIN:,} training molecules, got "
                f"{m:,}" if m > KERNEL_MAX_TRAIN else kernel_memory_obstacle(m, available))
    if obstacle is None:
        return m, None
    if choice == "on":
        raise SettingError("kernel_ridge", f"on, but {obstacle}; use auto or off", colon=True)
    return 0, f"note: no kernel ridge (--kernel-ridge auto): {obstacle}"


def check_memory(estimate: MemoryEstimate, batch_size: int, ensemble_size: int,
                 available: int | None = None) -> None:
    """Refuse a run whose estimate exceeds the available memory.

    Args:
        estimate: from ``training_memory``.
        batch_size, ensemble_size: shown in the message.
        available: bytes available (default: ``available_memory()``; None: unknown,
            nothing is refused).

    Raises:
        SettingError: naming ``batch_size`` (and the other settings the estimate
            follows), with the estimate and what is available.
    """
    available = available_memory() if available is None else available
    if available is None or estimate.total <= available:
        return
    raise SettingError("batch_size", (
        f"with hidden, heads, layers and ensemble_size as set, this run needs "
        f"about {_gb(estimate.total)} of memory ({estimate.parameters:,} parameters: "
        f"{_gb(estimate.training)} to train one model, {_gb(estimate.kept_models)} for "
        f"the {ensemble_size} kept; {_gb(estimate.activations)} of activations for a "
        f"batch of {batch_size}) but {_gb(available)} is available; make the model, the "
        f"batch or the ensemble smaller"), colon=True)
