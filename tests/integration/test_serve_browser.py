"""``setattn serve``'s page in a real browser: headless Chromium (Debian's package)
driven by Playwright. Paste three SMILES (one invalid), press Predict, read the table,
open a picture, download the CSV, upload a CSV, and take the screenshot the guide shows.

Skips, saying why, where Chromium or Playwright is absent (``.ci/run`` installs
Chromium). ``SETATTN_SCREENSHOT=1`` also writes the screenshot into the guide's
``docs/guide/_static/serve_page.png``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="setattn serve needs the serve extra (fastapi)")
pytest.importorskip("uvicorn", reason="setattn serve needs the serve extra (uvicorn)")
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="the browser test needs playwright (the dev extra)")

from serve_helpers import post_json, request, serving, tiny_run  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "guide" / "_static" / "serve_page.png"
PASTED = ["CN(C)C(=O)c1ccc(cc1)OC", "not_a_smiles", "c1ccccc1O"]

pytestmark = pytest.mark.skipif(not CHROMIUM.is_file(),
                                reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    run = tiny_run(tmp_path_factory.mktemp("browser"))
    with serving(run) as (url, _), sync_api.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1180, "height": 900},
                                   accept_downloads=True)
            tab.set_default_timeout(60_000)
            tab.goto(url + "/")
            yield url, tab
        finally:
            browser.close()


def _table(tab) -> list[list[str]]:
    return [[cell.strip() for cell in row]
            for row in tab.eval_on_selector_all(
                "#results tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")]


def test_paste_predict_explain_download(page, tmp_path):
    url, tab = page
    tab.fill("#smiles", "\n".join(PASTED))
    tab.click("#predict")
    tab.wait_for_selector("#results tbody tr:nth-child(3)")
    table = _table(tab)
    header, rows = table[0], table[1:]
    assert header == ["smiles", "expt", "expt_std", "expt_lower", "expt_upper", "error"]
    assert [r[0] for r in rows] == PASTED
    assert rows[1][-1] == "invalid SMILES: SMILES syntax error" and rows[1][1:-1] == [""] * 4
    _, api = post_json(url, "/predict", {"smiles": PASTED})
    for shown, row in zip(rows, api["rows"]):
        assert [float(x) if x else None for x in shown[1:-1]] == \
            [row[c] for c in header[1:-1]]
    assert "3 molecules: 2 predicted, 1 invalid" in tab.inner_text("#status")

    tab.click("#results tbody tr:nth-child(1)")  # its atoms' picture
    tab.wait_for_selector("#picture svg")
    words = tab.inner_text("#explanation")
    assert words.startswith(PASTED[0] + ": predicted expt ") and "integrated-gradients" in words
    assert "contribution to expt" in tab.inner_html("#picture")

    with tab.expect_download() as download:
        tab.click("#download")
    path = tmp_path / "downloaded.csv"
    download.value.save_as(path)
    _, _, expected = request(url, "POST", "/predict?format=csv",
                             json.dumps({"smiles": PASTED}).encode())
    assert path.read_bytes().decode("utf-8") == expected  # setattn predict's CSV

    shot = tmp_path / "serve_page.png"
    tab.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size < 200_000
    if os.environ.get("SETATTN_SCREENSHOT") == "1":
        shutil.copyfile(shot, SCREENSHOT)


def test_upload_a_csv(page, tmp_path):
    url, tab = page
    data = tmp_path / "mols.csv"
    with data.open("w", newline="") as handle:
        csv.writer(handle).writerows([["name", "smiles"], ["ethanol", "CCO"], ["bad", "C(C"]])
    tab.set_input_files("#csv-file", str(data))
    tab.wait_for_function("document.querySelectorAll('#results tbody tr').length === 2 && "
                          "document.querySelector('#results tbody td').textContent === 'CCO'")
    rows = _table(tab)[1:]
    assert [r[0] for r in rows] == ["CCO", "C(C"] and rows[1][-1].startswith("invalid SMILES")
    _, _, expected = request(url, "POST", "/predict/csv?format=csv", data.read_bytes(),
                             "text/csv")
    assert list(csv.reader(io.StringIO(expected)))[1][1] == rows[0][1]
