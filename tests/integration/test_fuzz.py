"""Fuzzing with hypothesis (bounded: few examples, deterministic, a deadline each).

* SMILES: real ones from the bundled sets with random characters inserted, deleted or
  replaced; featurisation gives a well-formed molecule graph or ``InvalidSmilesError``,
  and the molecule model gives finite predictions for every graph it gets.
* graphs: 0 nodes upward, duplicate edges, self loops, isolated nodes, through
  ``GATConv`` / ``GATv2Conv`` (against PyG's layers) and ``GlobalAttentionPool``
  (empty graphs in the batch).
* ``setattn predict``: CSV files of fuzzed SMILES, short and blank records, commas,
  quotes and line breaks inside cells, any chunk size, 1 or 2 workers: one output row
  per input record, in order, with its SMILES; empty predictions exactly where the
  error column says why (a "note: " about fragments keeps the prediction).
* CSV dialects: comma, semicolon or tab; a UTF-8 byte-order mark or none; minimal,
  full or non-numeric quoting; UTF-8, UTF-16, latin-1 or cp1252; gzip or not; LF or
  CRLF line ends: ``read_molecule_table`` and ``predict_csv`` read back every cell.
* ``setattn`` arguments: random flags and values for ``train`` and ``explain``: exit
  status 0, or 2 with a one-line-headed message (argparse's usage errors included);
  never a traceback.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch
import torch_geometric.nn as pyg_nn
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from molecule_runs import freesolv_slice
from torch_geometric.data import Batch

from setattn import cli
from setattn.chem.descriptors import descriptor_count
from setattn.datasets import DATASETS_DIR
from setattn.datasets.molecules import read_molecule_table
from setattn.domains.molecules import (
    ATOM_FEATURE_DIM,
    BOND_FEATURE_DIM,
    InvalidSmilesError,
    rdkit_descriptors,
)
from setattn.explain import METHODS
from setattn.molprop.config import NetworkConfig
from setattn.molprop.ensemble import Ensemble
from setattn.molprop.featurize import featurize
from setattn.molprop.network import MoleculeNetwork
from setattn.molprop.predict import predict_csv
from setattn.nn import GATConv, GATv2Conv, GlobalAttentionPool

_FUZZ = settings(derandomize=True, database=None, deadline=5000,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fuzz(examples: int) -> settings:
    """Deterministic examples (the same on every run), no example database on disk, and
    a deadline generous enough for a shared 2-core machine."""
    return settings(_FUZZ, max_examples=examples)


def _bundled_smiles() -> list[str]:
    out = []
    for name in ("freesolv.csv", "delaney-processed.csv"):
        with open(DATASETS_DIR / "molecules" / name, newline="") as handle:
            out += [row["smiles"] for row in csv.DictReader(handle)]
    return out


SMILES = _bundled_smiles()
ALPHABET = list("CNOSPFIBrlcnos()[]=#@+-\\/%.*:~$0123456789H ") + [",", '"', "\n", "\r",
                                                                  "\x00", "é", "\t"]


@st.composite
def edited_smiles(draw) -> str:
    """A bundled SMILES with 0-4 random single-character edits."""
    s = draw(st.sampled_from(SMILES))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        i = draw(st.integers(0, len(s)))
        c = draw(st.sampled_from(ALPHABET))
        if op == "insert":
            s = s[:i] + c + s[i:]
        elif i < len(s):
            s = s[:i] + (c if op == "replace" else "") + s[i + 1:]
    return s


# ----------------------------------------------------------------------------
# SMILES
# ----------------------------------------------------------------------------

TINY_MODEL = MoleculeNetwork(NetworkConfig(hidden=8, layers=1, heads=2)).eval()


@fuzz(100)
@given(smiles=edited_smiles())
def test_edited_smiles_featurise_or_raise_invalid_smiles(smiles):
    try:
        data = featurize(smiles, row=3, source="x.csv")
    except InvalidSmilesError as err:
        assert err.smiles == smiles and err.row == 3 and err.reason
        return
    n, e = data.num_nodes, data.edge_index.shape[1]
    assert n >= 1 and data.x.shape == (n, ATOM_FEATURE_DIM) and torch.isfinite(data.x).all()
    assert data.edge_attr.shape == (e, BOND_FEATURE_DIM)
    if e:
        assert 0 <= int(data.edge_index.min()) and int(data.edge_index.max()) < n
        pairs = set(map(tuple, data.edge_index.t().tolist()))
        assert all((j, i) in pairs for i, j in pairs)  # bonds go both ways
    d = rdkit_descriptors(smiles)
    assert d.shape == (1, descriptor_count()) and torch.isfinite(d).all()
    out = TINY_MODEL(Batch.from_data_list([data]))  # (1, 1)
    assert out.shape == (1, 1) and torch.isfinite(out).all()


# ----------------------------------------------------------------------------
# Graphs
# ----------------------------------------------------------------------------


@st.composite
def multigraphs(draw) -> tuple[int, torch.Tensor]:
    """(N, edge_index (2, E)): N >= 0 nodes, random edges, then duplicates and self loops."""
    n = draw(st.integers(0, 9))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                          max_size=25)) if n else []
    if pairs and draw(st.booleans()):
        pairs += pairs[:draw(st.integers(1, len(pairs)))]  # duplicate edges
    if n and draw(st.booleans()):
        pairs += [(i, i) for i in range(0, n, draw(st.integers(1, 3)))]  # self loops
    return n, torch.tensor(pairs, dtype=torch.long).reshape(-1, 2).t()  # (2, E)


@fuzz(60)
@given(graph=multigraphs(), v2=st.booleans(), loops=st.booleans(), use_edges=st.booleans(),
       seed=st.integers(0, 2**16))
def test_gat_layers_on_multigraphs_match_pyg(graph, v2, loops, use_edges, seed):
    n, edge_index = graph
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g, requires_grad=True)  # (N, F)
    edge_attr = torch.randn(edge_index.shape[1], 3, generator=g) if use_edges else None
    theirs = (pyg_nn.GATv2Conv if v2 else pyg_nn.GATConv)(
        5, 4, heads=2, add_self_loops=loops, edge_dim=3 if use_edges else None)
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0.0, 0.5, generator=g)
    mine = (GATv2Conv if v2 else GATConv).from_pyg(theirs)
    out = mine(x, edge_index, edge_attr)  # (N, 8)
    assert out.shape == (n, 8) and torch.isfinite(out).all()
    if n:
        assert (out - theirs(x, edge_index, edge_attr)).abs().max() <= 1e-5
        out.square().sum().backward()
        assert torch.isfinite(x.grad).all()


@fuzz(40)
@given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_attention_pool_with_empty_graphs(sizes, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), 6, generator=g)  # (N, D)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))  # (N,)
    torch.manual_seed(seed)
    pool = GlobalAttentionPool(6, heads=2)
    out = pool(x, batch, num_graphs=len(sizes))  # (G, 6)
    assert out.shape == (len(sizes), 6) and torch.isfinite(out).all()
    for graph, size in enumerate(sizes):
        if size == 0:
            assert (out[graph] == 0).all()  # nothing to attend to: zeros, not NaN
        else:  # a graph alone gives what it gives in the batch
            alone = pool(x[batch == graph], None, num_graphs=1)[0]  # (6,)
            assert torch.allclose(out[graph], alone, atol=1e-6)


# ----------------------------------------------------------------------------
# setattn predict: rows kept, in order
# ----------------------------------------------------------------------------

ENSEMBLE = Ensemble([MoleculeNetwork(NetworkConfig(hidden=8, layers=1, heads=2))
                     for _ in range(2)]).eval()

record = st.one_of(
    st.tuples(st.integers(0, 99).map(str), edited_smiles()).map(list),  # id, smiles
    st.tuples(st.integers(0, 99).map(str), edited_smiles(), st.text(max_size=3)).map(list),
    st.just(["7"]),  # no smiles cell
    st.just([]),  # a blank line
)


@pytest.mark.slow
@fuzz(20)
@given(records=st.lists(record, max_size=25), chunk_rows=st.integers(1, 7),
       workers=st.sampled_from([1, 1, 2]))
def test_predict_keeps_every_row_in_order(records, chunk_rows, workers):
    with tempfile.TemporaryDirectory() as tmp:
        data, output = Path(tmp) / "in.csv", Path(tmp) / "out.csv"
        with open(data, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows([["id", "smiles"], *records])
        if any(len(rec) > 2 and rec[2].strip() for rec in records):  # a cell past the header
            with pytest.raises(ValueError, match="cells, but the header has 2 columns"):
                predict_csv(ENSEMBLE, ["y"], data, output, "smiles", chunk_rows=chunk_rows,
                            workers=workers)
            assert not output.exists()
            return
        counts = predict_csv(ENSEMBLE, ["y"], data, output, "smiles",
                                 chunk_rows=chunk_rows, workers=workers)
        with open(output, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    assert rows[0] == ["smiles", "y", "y_std", "error"]
    assert counts["rows"] == len(rows) - 1 == len(records)
    failed = 0
    for rec, (smiles, mean, std, error) in zip(records, rows[1:]):
        assert smiles == (rec[1] if len(rec) > 1 else "")
        no_prediction = bool(error) and not error.startswith("note: ")
        assert (mean == std == "") == no_prediction
        assert no_prediction == error.startswith(("invalid SMILES: ", "skipped: "))
        if not no_prediction:
            assert math.isfinite(float(mean)) and float(std) >= 0
        failed += no_prediction
    assert counts["errors"] == failed


# ----------------------------------------------------------------------------
# CSV dialects: every everyday way of writing the same table reads back the same
# ----------------------------------------------------------------------------

NAME_CHARS = list("abcxyz éüßµ;,\t\"'") + ["\n"]


@st.composite
def molecule_tables(draw) -> list[tuple[str, str, float]]:
    """1-8 rows of (name, SMILES, target): names with delimiters, quotes, line breaks and
    non-ASCII letters in them."""
    return draw(st.lists(st.tuples(
        st.text(alphabet=NAME_CHARS, max_size=8), st.sampled_from(SMILES[:300]),
        st.floats(-1e4, 1e4, allow_nan=False, width=32)), min_size=1, max_size=8))


@fuzz(60)
@given(table=molecule_tables(), delimiter=st.sampled_from([",", ";", "\t"]),
       quoting=st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC]),
       encoding=st.sampled_from(["utf-8", "utf-8-bom", "utf-16", "latin-1", "cp1252"]),
       compress=st.booleans(), newline=st.sampled_from(["\n", "\r\n"]))
@example(table=[("a;b", "CCO", 1.5)], delimiter=";", quoting=csv.QUOTE_MINIMAL,
         encoding="utf-8-bom", compress=False, newline="\r\n")  # Excel, European locale
def test_csv_dialects_read_back_every_cell(table, delimiter, quoting, encoding, compress,
                                           newline):
    text = io.StringIO()
    writer = csv.writer(text, delimiter=delimiter, quoting=quoting, lineterminator=newline)
    writer.writerows([["name", "smiles", "y"], *table])
    data = text.getvalue().encode(encoding.removesuffix("-bom"))
    data = (b"\xef\xbb\xbf" + data) if encoding == "utf-8-bom" else data
    # UTF-8 (with or without its BOM) and UTF-16 (with its BOM) need no --encoding
    named = encoding if encoding in ("latin-1", "cp1252") else None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("t.csv.gz" if compress else "t.csv")
        path.write_bytes(gzip.compress(data) if compress else data)
        read = read_molecule_table(path, "smiles", ["y"], named)
        output = Path(tmp) / "out.csv"
        predict_csv(ENSEMBLE.member(0), ["y"], path, output, "smiles", encoding=named)
        with open(output, newline="", encoding="utf-8") as handle:
            predicted = [row["smiles"] for row in csv.DictReader(handle)]
    assert read.smiles == predicted == [smiles for _, smiles, _ in table]
    assert read.y[:, 0].tolist() == [y for _, _, y in table]  # float32 values, exact


# ----------------------------------------------------------------------------
# setattn arguments
# ----------------------------------------------------------------------------

TRAIN_VALUES: dict[str, list] = {
    "--epochs": ["1", "2", "0", "-2", "x"],
    "--batch-size": ["1", "5", "0", "-1"],
    "--split": ["random", "scaffold", "kfold", "bogus"],
    "--split-sizes": [["0.8", "0.1", "0.1"], ["0.5", "0.5", "0"], ["1", "0", "0"],
                      ["0.9", "0.2", "0.1"], ["-1", "1", "1"], ["nan", "0.5", "0.5"]],
    "--seed": ["0", "7", "-3"],
    "--fold": ["0", "3", "-1", "99"],
    "--ensemble-size": ["1", "2", "0"],
    "--task": ["regression", "classification", "other"],
    "--target-columns": [["expt"], ["expt", "calc"], ["nosuch"], ["smiles"], ["iupac"]],
    "--smiles-column": ["smiles", "iupac", "nosuch"],
    "--lr": ["1e-3", "0", "-1", "nan", "inf", "1e30"],
    "--patience": ["1", "0"],
    "--hidden": ["8", "7", "0", "-8"],
    "--heads": ["2", "3", "0", "-2"],
    "--layers": ["0", "1", "-1"],
    "--dropout": ["0", "0.5", "1", "1.5", "-0.1", "nan"],
    "--conv": ["gatv2", "gat", "gcn"],
    "--global-layers": ["0", "1", "2", "-1"],
    "--max-hops": ["1", "8", "0", "5000"],
    "--weight-decay": ["0", "-1"],
    "--num-threads": ["1", "0"],
    "--descriptors": ["none", "rdkit", "all"],
    "--resume": [None],
    "--strict": [None],
    "--max-heavy-atoms": ["300", "8", "0", "-1"],
    "--encoding": ["utf-8", "latin-1", "klingon"],
}


@st.composite
def train_argv(draw) -> list[str]:
    flags = draw(st.lists(st.sampled_from(sorted(TRAIN_VALUES)), max_size=5, unique=True))
    argv = ["--target-columns", "expt", "--hidden", "8", "--layers", "1", "--heads", "2",
            "--epochs", "1", "--descriptors", "none"]  # argparse keeps a later value
    for flag in flags:
        value = draw(st.sampled_from(TRAIN_VALUES[flag]))
        argv += [flag] if value is None else [flag, *([value] if isinstance(value, str)
                                                       else value)]
    return argv


def _run(argv: list[str]) -> tuple[int, str]:
    """``setattn ARGV`` in this process: (exit status, stderr); argparse exits become 2."""
    err = io.StringIO()
    threads = torch.get_num_threads()
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            status = cli.main(argv)
    except SystemExit as exit_:  # argparse: usage errors
        status = exit_.code
    finally:
        torch.set_num_threads(threads)
    return status, err.getvalue()


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz")
    freesolv_slice(folder / "fs.csv", 30)
    status, err = _run(["train", "--data", str(folder / "fs.csv"), "--target-columns",
                        "expt", "--epochs", "1", "--output-dir", str(folder / "run"),
                        "--hidden", "8", "--layers", "1", "--heads", "2",
                        "--descriptors", "none", "--num-threads", "1"])
    assert status == 0, err
    return folder


# values that once ended in a traceback (found by this test); kept as fixed examples
_BASE = ["--target-columns", "expt", "--hidden", "8", "--layers", "1", "--descriptors", "none",
         "--epochs", "1"]


@pytest.mark.slow
@fuzz(25)
@given(argv=train_argv())
@example(argv=[*_BASE, "--heads", "0"])
@example(argv=[*_BASE, "--hidden", "-8"])
@example(argv=[*_BASE, "--heads", "2", "--dropout", "nan"])
@example(argv=[*_BASE, "--heads", "2", "--seed", "-3"])
@example(argv=[*_BASE, "--heads", "2", "--lr", "inf"])
@example(argv=[*_BASE, "--heads", "2", "--lr", "1e30"])  # diverges: DivergedError
@example(argv=[*_BASE, "--heads", "2", "--global-layers", "1", "--max-hops", "1"])
@example(argv=[*_BASE, "--heads", "2", "--global-layers", "2"])  # more than --layers
def test_train_arguments_end_in_success_or_a_named_error(fuzz_dir, argv):
    out = Path(tempfile.mkdtemp(dir=fuzz_dir))
    status, err = _run(["train", "--data", str(fuzz_dir / "fs.csv"), "--output-dir", str(out),
                        *argv])
    assert status in (0, 2), err
    if status == 0:
        assert (out / "metrics.json").is_file()
    else:
        first = err.strip().splitlines()[-1] if "usage:" in err else err.splitlines()[0]
        assert first.startswith(("setattn train: error: ", "setattn: error: ")), err
        assert "Traceback" not in err


@pytest.mark.slow
@fuzz(15)
@given(smiles=edited_smiles(), suffix=st.sampled_from([".png", ".svg", ".pdf", ""]),
       method=st.sampled_from(METHODS))
def test_explain_arguments_end_in_success_or_a_named_error(fuzz_dir, smiles, suffix, method):
    picture = Path(tempfile.mkdtemp(dir=fuzz_dir)) / f"atoms{suffix}"
    status, err = _run(["explain", "--model", str(fuzz_dir / "run"), "--smiles", smiles,
                        "--output", str(picture), "--method", method])
    assert status in (0, 2), err
    assert (status == 0) == picture.is_file()
    if status == 2:
        assert err.startswith("setattn explain: error: "), err
