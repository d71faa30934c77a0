"""``setattn serve``'s JSON API: the same table as ``setattn predict``, its limits, its
errors, and a run folder left as it was."""

from __future__ import annotations

import concurrent.futures
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="setattn serve needs the serve extra (fastapi)")
pytest.importorskip("uvicorn", reason="setattn serve needs the serve extra (uvicorn)")

from molecule_runs import subprocess_env  # noqa: E402
from serve_helpers import post_json, request, serving, tiny_run  # noqa: E402

from setattn import cli  # noqa: E402
from setattn.cli.parser import build_parser  # noqa: E402
from setattn.datasets import DATASETS_DIR  # noqa: E402

ODD = ["", "   ", "xx", "C(C", "c1ccccc", "[Xx]", "\u2603", "C\x00C", "C" * 400,
       "CC.[Na+].[Cl-]", "[2H]C([2H])([2H])O", "*CC", "C" * 5]
"""Input that must come back as rows (errors or notes), never a failed request: empty,
blank, syntax errors, an unknown element, a snowman, a NUL byte, 400 heavy atoms (over
the size limit), salts, isotopes, a dummy atom, and a valid molecule last."""


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return tiny_run(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(run):
    with serving(run, max_molecules=40) as (url, service):
        yield url


def _molecules(n: int = 12) -> list[str]:
    with (DATASETS_DIR / "molecules" / "freesolv.csv").open(newline="") as handle:
        smiles = [row["smiles"] for row in csv.DictReader(handle)][100:100 + n]
    return [*smiles[:4], "not a smiles", *smiles[4:], "", "CCO.Cl"]


def _cli_predictions(folder: Path, run: Path, smiles: list[str]) -> str:
    data = folder / "in.csv"
    with data.open("w", newline="") as handle:
        csv.writer(handle).writerows([["smiles"], *([s] for s in smiles)])
    out = folder / "out.csv"
    assert cli.main(["predict", "--model", str(run), "--data", str(data), "--output",
                     str(out)]) == 0
    return out.read_bytes().decode("utf-8")  # its line ends as written


def test_api_predictions_equal_setattn_predict(server, run, tmp_path):
    smiles = _molecules()
    expected = _cli_predictions(tmp_path, run, smiles)
    status, kind, text = request(server, "POST", "/predict?format=csv",
                                 json.dumps({"smiles": smiles}).encode())
    assert (status, kind.split(";")[0]) == (200, "text/csv")
    assert text == expected  # the same bytes as the file setattn predict writes
    status, result = post_json(server, "/predict", {"smiles": smiles})
    assert status == 200
    table = list(csv.reader(io.StringIO(expected)))
    assert result["columns"] == table[0] == ["smiles", "expt", "expt_std", "expt_lower",
                                             "expt_upper", "error"]
    for row, cells in zip(result["rows"], table[1:], strict=True):
        assert [row[c] for c in ("smiles", "error")] == [cells[0], cells[-1]]
        assert [row[c] for c in table[0][1:-1]] == [float(x) if x else None
                                                    for x in cells[1:-1]]
        assert all(isinstance(row[c], float) for c in table[0][1:-1]) or cells[-1]
    assert result["counts"] == {"rows": len(smiles), "errors": 2, "notes": 1}
    assert result["interval_level"] == pytest.approx(0.9)


def test_csv_upload_equals_setattn_predict(server, run, tmp_path):
    smiles = _molecules(6)
    expected = _cli_predictions(tmp_path, run, smiles)
    body = (tmp_path / "in.csv").read_bytes()
    status, _, text = request(server, "POST", "/predict/csv?format=csv", body, "text/csv")
    assert (status, text) == (200, expected)
    status, _, text = request(server, "POST", "/predict/csv?smiles_column=SMILES", body,
                              "text/csv")
    assert status == 422 and "missing column(s) ['SMILES']" in text
    assert "upload.csv" in text and "/tmp" not in text and tmp_path.name not in text


def test_invalid_smiles_are_row_errors_never_a_failed_request(server):
    status, result = post_json(server, "/predict", {"smiles": ODD})
    assert status == 200
    rows = result["rows"]
    assert [r["smiles"] for r in rows] == ODD  # one row per SMILES, in order
    errors = [r["error"] for r in rows]
    assert errors[0] == "invalid SMILES: empty SMILES"
    assert errors[8].startswith("skipped: ")  # over the heavy-atom limit
    assert errors[9].startswith("note: ")  # a salt: its largest fragment
    assert errors[-1] == "" and rows[-1]["expt"] is not None
    assert all(r["expt"] is None for r, e in zip(rows, errors) if e and not
               e.startswith("note: "))


@pytest.mark.parametrize("payload", [{"smiles": "CCO"}, {"smiles": [1, 2]}, {"smile": []},
                                     [1, 2], "CCO"])
def test_malformed_requests_are_422(server, payload):
    status, result = post_json(server, "/predict", payload)
    assert status == 422 and result["detail"]


def test_limits_name_themselves(server, run):
    status, result = post_json(server, "/predict", {"smiles": ["C"] * 40})  # at the limit
    assert status == 200 and len(result["rows"]) == 40
    status, result = post_json(server, "/predict", {"smiles": ["C"] * 41})
    assert status == 422
    assert result["detail"] == ("41 SMILES in one /predict request; the limit is 40 per "
                                "request (setattn serve --max-molecules)")
    with serving(run) as (url, service):  # the defaults
        assert service.limits.max_molecules == 1000
        status, result = post_json(url, "/predict", {"smiles": ["C"] * 10_000})
        assert status == 422 and "the limit is 1000 per request" in result["detail"]
        body = json.dumps({"smiles": ["C" * 100] * 21_000}).encode()  # over 2 MB
        status, _, text = request(url, "POST", "/predict", body)
        assert status == 413 and "limit of 2000000 bytes" in text
        assert "--max-body-bytes" in text


def test_explain_draws_each_molecule_as_setattn_explain(server, run):
    from setattn.molprop.checkpoint import load_run
    from setattn.molprop.explain import explain_molecule

    status, result = post_json(server, "/explain",
                               {"smiles": ["CCO", "xx", "CC(=O)O.[Na+]", "[2H]OC"]})
    assert status == 200 and result["method"] == "integrated-gradients"
    ok, bad, salt, heavy = result["explanations"]
    assert heavy["error"].startswith("note: isotopes stripped")  # the notes predict writes
    assert bad == {"smiles": "xx", "error": "invalid SMILES: SMILES syntax error"}
    assert ok["svg"].startswith("<svg") and ok["svg"].endswith("</svg>")
    assert "contribution to expt" in ok["svg"]  # the colour bar's caption
    assert [a["symbol"] for a in ok["atoms"]] == ["C", "C", "O"]
    assert ok["prediction"].startswith("expt ") and "sum to prediction" in ok["sum"]
    assert salt["error"].startswith("note: ") and salt["atoms"][-1]["contribution"] == 0
    models, _ = load_run(run)
    e = explain_molecule(models, "CCO")
    assert [a["contribution"] for a in ok["atoms"]] == pytest.approx(
        e.attribution.values.tolist(), abs=1e-6)


@pytest.mark.parametrize(("payload", "words"), [
    ({"smiles": ["CCO"], "method": "nope"}, "is not one of"),
    ({"smiles": ["CCO"], "target": "logS"}, "'logS' is not a target of this model (expt)"),
    ({"smiles": ["CCO"] * 21}, "the limit is 20 per request (setattn serve --max-explain)"),
])
def test_explain_refusals_are_422(server, payload, words):
    status, result = post_json(server, "/explain", payload)
    assert status == 422 and words in result["detail"]


def test_model_card_and_api_name_no_server_path(server, run):
    status, _, text = request(server, "GET", "/model")
    card = json.loads(text)
    assert status == 200 and card["targets"] == ["expt"] and card["members"] == 2
    assert card["molecules"] == 100 and card["split"]["train"] > 0
    assert set(card["test"]) >= {"rmse", "mae", "r2"}
    assert card["interval"]["level"] == pytest.approx(0.9)
    assert card["options"]["data"] == "freesolv100.csv"
    assert str(run.parent) not in text  # the run's place on the server is not said
    status, _, text = request(server, "GET", "/openapi.json")
    schema = json.loads(text)
    assert set(schema["paths"]) == {"/model", "/predict", "/predict/csv", "/explain"}
    names = {p["name"] for path in schema["paths"].values() for op in path.values()
             for p in op.get("parameters", [])}
    assert names == {"format", "smiles_column"}  # nothing names a file
    status, kind, page = request(server, "GET", "/")
    assert status == 200 and kind.startswith("text/html")
    assert "freesolv100.csv" in page and "90% conformal" in page and 'id="predict"' in page


def _snapshot(folder: Path) -> dict[str, tuple]:
    """Every file and folder under ``folder``: a file's size, time and SHA-256."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            if p.is_file() else ("folder", p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


def test_concurrent_requests_stay_aligned_and_the_run_is_untouched(run):
    before = _snapshot(run)
    lists = [_molecules()[k:] + ODD[: k % 5] for k in range(8)]
    with serving(run, workers=2) as (url, _):
        expected = [post_json(url, "/predict", {"smiles": s})[1] for s in lists]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda s: post_json(url, "/predict", {"smiles": s}),
                                    lists * 2))
        post_json(url, "/explain", {"smiles": ["CCO"]})
    for (status, result), smiles, first in zip(answers, lists * 2, expected * 2):
        assert status == 200 and [r["smiles"] for r in result["rows"]] == smiles
        assert result["rows"] == first["rows"]
    assert _snapshot(run) == before  # nothing written, touched or added


def test_serve_binds_loopback_by_default():
    args = build_parser().parse_args(["serve", "--model", "runs/x"])
    assert (args.host, args.port, args.max_molecules) == ("127.0.0.1", 8000, 1000)


def test_serve_command_serves_the_page(run, tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "setattn.cli", "serve", "--model", str(run),
                             "--port", str(port)], env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                status, kind, page = request(f"http://127.0.0.1:{port}", "GET", "/")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
                time.sleep(0.2)
        assert status == 200 and "<h1>setattn: run (expt)</h1>" in page
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert f"on http://127.0.0.1:{port}/" in out
    assert proc.returncode in (0, 128 + 15), out  # ended by SIGTERM, as the CLI ends


def test_serve_refuses_a_missing_run(capsys):
    status = cli.main(["serve", "--model", os.devnull + "-none"])
    assert status == 2
    assert "argument --model: no such file" in capsys.readouterr().err
