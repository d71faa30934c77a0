"""The flags of each ``setattn`` command that are not settings of a run, declared as
dataclass fields with ``option`` like the run's settings (``setattn.molprop.config``),
so that ``setattn.cli.parser`` makes every flag the same way: its name, default, help
text and the range of values it accepts come from one field.

``train`` takes ``TrainFlags`` and every option of a ``RunConfig``
(``setattn.molprop.config.run_flags``); ``pretrain`` takes ``PretrainFlags`` and the
fields of ``setattn.molprop.pretrain.PretrainConfig``; ``predict`` takes
``PredictFlags``; ``embed`` takes ``EmbedFlags``;
``explain`` takes ``ExplainFlags``; ``serve`` takes ``ServeFlags``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from setattn.cli.process import DEFAULT_THREADS
from setattn.explain import METHODS
from setattn.molprop.config import (
    DEFAULT_DESCRIPTORS,
    DESCRIPTORS,
    DEVICE_HELP,
    MAX_HEAVY_ATOMS,
    Range,
    option,
)
from setattn.molprop.explain import DEFAULT_METHOD
from setattn.molprop.loop import CHECKPOINT_SECONDS

__all__ = ["RUN_DIR_FLAGS", "EmbedFlags", "ExplainFlags", "PredictFlags", "PretrainFlags",
           "ServeFlags", "TrainFlags"]

RUN_DIR_FLAGS = ("output_dir", "resume")
"""The ``TrainFlags`` that ``train --help`` lists before the run's settings."""


def _threads() -> Any:
    """``--num-threads``, a flag of every command."""
    return option(DEFAULT_THREADS, f"torch CPU threads (default: {DEFAULT_THREADS}; small "
                  "molecule batches rarely gain from more)", type=int, bounds=Range(1),
                  show_default=False)


def _model() -> Any:
    """``--model`` of ``predict`` and ``explain``."""
    return option(None, "run directory (or one best.pt)", required=True)


@dataclass
class TrainFlags:
    """``setattn train``'s flags besides the run's settings.

    Attributes:
        output_dir: the run directory written.
        resume: continue the run in ``output_dir``.
        descriptors: "fast", "lean", "rdkit" or "none" (None: the default, or the resumed run's).
        checkpoint_seconds: least training time between two writes of ``last.pt``.
        num_threads: torch CPU threads.
    """

    output_dir: str = option(None, "run directory to write", required=True)
    resume: bool = option(False, "continue the interrupted run in --output-dir",
                          action="store_true", show_default=False)
    descriptors: str | None = option(None, "append RDKit 2D descriptors to the readout: "
                                     "rdkit (all), lean (less the slow path indices), "
                                     "fast (also less the substructure counts) or none "
                                     f"(default: {DEFAULT_DESCRIPTORS})",
                                     choices=sorted(DESCRIPTORS))
    checkpoint_seconds: float = option(
        CHECKPOINT_SECONDS, "least training time between two writes of last.pt, which "
        "--resume continues from; it is also written at the end and on Ctrl-C or an error, "
        "so only a process killed outright loses up to S seconds of training (default: "
        f"{CHECKPOINT_SECONDS:g}; 0: after every epoch)", type=float, metavar="S",
        bounds=Range(0, finite=True), show_default=False)
    num_threads: int = _threads()


@dataclass
class PredictFlags:
    """``setattn predict``'s flags.

    Attributes:
        model: a run directory, or one ``best.pt``.
        data: the CSV predicted.
        output: the CSV written.
        smiles_column: None: the run's.
        encoding: the CSV's text encoding (None: UTF-8, or UTF-16 with its BOM).
        max_heavy_atoms: larger molecules get no prediction (None: the run's setting).
        workers: processes featurising and predicting in parallel (None: the free
            cores, ``predict.free_cores``).
        device: where the models run.
        num_threads: torch CPU threads.
    """

    model: str = _model()
    data: str = option(None, "CSV file with a header line", required=True)
    output: str = option(None, "CSV file to write", required=True)
    smiles_column: str | None = option(None, "default: the one the model was trained with")
    encoding: str | None = option(None, "text encoding of the CSV, e.g. latin-1 or cp1252 "
                                  "(default: UTF-8, or UTF-16 with its byte-order mark)")
    max_heavy_atoms: int | None = option(
        None, "molecules with more heavy atoms get no prediction (default: the run's "
        f"setting, {MAX_HEAVY_ATOMS} unless it set another)", type=int, metavar="N",
        bounds=Range(1))
    workers: int | None = option(
        None, "processes featurising and predicting in parallel (default: the cores free "
        "now, the usable cores less the 1-minute load average; 1 with a GPU); the output "
        "is the same", type=int, bounds=Range(1))
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")
    num_threads: int = _threads()


@dataclass
class PretrainFlags:
    """``setattn pretrain``'s flags besides the pretraining settings
    (``setattn.molprop.pretrain.PretrainConfig``).

    Attributes:
        output_dir: the folder written (``encoder.pt`` among it).
        resume: continue the pretraining in ``output_dir`` with its settings.
        checkpoint_seconds: least training time between two writes of ``last.pt``.
        num_threads: torch CPU threads.
    """

    output_dir: str = option(None, "folder to write: encoder.pt (the encoder for "
                             "setattn train --pretrained), pretrain.json, last.pt",
                             required=True)
    resume: bool = option(False, "continue the interrupted pretraining in --output-dir",
                          action="store_true", show_default=False)
    checkpoint_seconds: float = option(
        60.0, "least training time between two writes of last.pt, which --resume continues "
        "from (also written at each epoch's end and on Ctrl-C)", type=float, metavar="S",
        bounds=Range(0, finite=True))
    num_threads: int = _threads()


@dataclass
class EmbedFlags:
    """``setattn embed``'s flags.

    Attributes:
        model: a run directory, one ``best.pt``, a pretrained encoder (``encoder.pt``
            or the folder ``setattn pretrain`` wrote), or ``default``: the encoder shipped
            in the package.
        data: the CSV of SMILES.
        output: the CSV of vectors written.
        smiles_column: None: the run's.
        member: one member's vectors (None: every member's, side by side).
        encoding: the CSV's text encoding (None: UTF-8, or UTF-16 with its BOM).
        max_heavy_atoms: larger molecules get no vector (None: the run's setting).
        device: where the models run.
        num_threads: torch CPU threads.
    """

    model: str = option(None, "run directory (or one best.pt), a pretrained encoder "
                        "(encoder.pt, or the folder setattn pretrain wrote), or default: "
                        "the encoder shipped with setattn", required=True)
    data: str = option(None, "CSV file with a header line", required=True)
    output: str = option(None, "CSV file to write: the SMILES, m<k>_<i> per member k and "
                         "component i, error", required=True)
    smiles_column: str | None = option(None, "default: the one the model was trained with")
    member: int | None = option(None, "one member's vectors, 0 to K - 1 (default: every "
                                "member's, side by side; they are not averaged)", type=int,
                                metavar="K", bounds=Range(0))
    encoding: str | None = option(None, "text encoding of the CSV, e.g. latin-1 or cp1252 "
                                  "(default: UTF-8, or UTF-16 with its byte-order mark)")
    max_heavy_atoms: int | None = option(
        None, "molecules with more heavy atoms get no vector (default: the run's setting)",
        type=int, metavar="N", bounds=Range(1))
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")
    num_threads: int = _threads()


@dataclass
class ExplainFlags:
    """``setattn explain``'s flags.

    Attributes:
        model: a run directory, or one ``best.pt``.
        smiles: one molecule, drawn into ``output`` (or ``data``: one of the two).
        data: a CSV of molecules, explained into the folder ``output``.
        smiles_column: with ``data``; None: the run's.
        output: a picture (.png or .svg), or a folder.
        method: how contributions are measured (``setattn.explain.METHODS``).
        target: the target explained (None: the first).
        max_pictures: with ``data``: pictures of the first N molecules.
        device: "auto" or "cpu" (explanations run on the CPU).
        num_threads: torch CPU threads.
    """

    model: str = _model()
    smiles: str | None = option(None, "one molecule: --output is its picture", group="input")
    data: str | None = option(None, "a CSV of molecules: --output is a folder", group="input")
    smiles_column: str | None = option(None, "with --data; default: the one the model was "
                                       "trained with")
    output: str = option(None, "picture (.png or .svg) for --smiles, folder for --data",
                         required=True)
    method: str = option(DEFAULT_METHOD, f"how contributions are measured (default: "
                         f"{DEFAULT_METHOD}, the best on benchmarks/attribution.py's "
                         "validation molecules)", choices=list(METHODS), show_default=False)
    target: str | None = option(None, "the target explained (default: the first)")
    max_pictures: int = option(50, "with --data: pictures of the first N molecules", type=int,
                               bounds=Range(0))
    device: str = option("auto", f"{DEVICE_HELP} (default: auto); explanations run on the "
                         "CPU, so auto means cpu here", metavar="DEVICE", show_default=False)
    num_threads: int = _threads()


@dataclass
class ServeFlags:
    """``setattn serve``'s flags (the limits are ``setattn.serve.ServeLimits``'s).

    Attributes:
        model: a run directory, or one ``best.pt``.
        host: the address listened on (127.0.0.1: this machine only).
        port: the TCP port.
        max_molecules: SMILES per /predict request.
        max_explain: SMILES per /explain request.
        max_body_bytes: bytes of one request's body (and of a compressed one, expanded).
        workers: processes predicting and explaining at once.
        budget_seconds: the time one request may take before its work is stopped.
        max_waiting: requests that may wait for a worker (more: 503).
        max_heavy_atoms: the largest molecule a request may hold (None: the run's).
        num_threads: torch CPU threads.
    """

    model: str = _model()
    host: str = option("127.0.0.1", "address to listen on (default: 127.0.0.1, this machine "
                       "only; 0.0.0.0 opens it to the network)", show_default=False)
    port: int = option(8000, "TCP port", type=int, bounds=Range(1, below=65536))
    max_molecules: int = option(1000, "most SMILES in one /predict request (more: 422)",
                                type=int, metavar="N", bounds=Range(1))
    max_explain: int = option(20, "most SMILES in one /explain request", type=int,
                              metavar="N", bounds=Range(1))
    max_body_bytes: int = option(2_000_000, "largest request body in bytes, and largest "
                                 "size a gzip body or file may expand to (more: 413)",
                                 type=int, metavar="BYTES", bounds=Range(1))
    workers: int = option(2, "worker processes predicting and explaining at once "
                          "(explanations hold at most half of them); further requests wait "
                          "their turn", type=int, bounds=Range(1))
    budget_seconds: float = option(30.0, "time one request may take, its wait for a worker "
                                   "included; then its work is stopped (422, or 503 if it "
                                   "was still waiting); so is the work of a client that "
                                   "leaves", type=float, metavar="S",
                                   bounds=Range(0, low_open=True, finite=True))
    max_waiting: int = option(32, "requests that may wait for a worker at once (more: 503 "
                              "with Retry-After)", type=int, metavar="N", bounds=Range(1))
    max_heavy_atoms: int | None = option(
        None, "largest molecule a request may hold; a SMILES too long for it is refused "
        f"unread (default: the run's setting, {MAX_HEAVY_ATOMS} unless it set another)",
        type=int, metavar="N", bounds=Range(1))
    num_threads: int = _threads()
