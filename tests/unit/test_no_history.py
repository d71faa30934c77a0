"""The tracked files speak of setattn as it is: no numbered development stages.

History lives in `git log` and in the CHANGELOG's versions. A sentence such as "the
default until session N" or "report run N's records" tells a reader how the project got
somewhere, not what it is; this test fails on any such reference in a tracked text file
outside the CHANGELOG and the bundled data sets (whose texts are facts, not ours).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Each pattern names one way a development stage gets numbered in prose.
STAGES = [
    r"\bsessions? #?\d+",
    r"\b(?:report|development|dev|scratch) runs? #?\d+",
    r"\bruns? \d+(?:'s| and \d+)\b",
    r"\bissues? #?\d+",
    r"\bturns? \d+\b",
    r"\b(?:until|since|before|after) (?:session|issue|report run)\b",
    r"\b(?:molecules_report|matched_width_run)\d+",  # records named by a stage
]
PATTERN = re.compile("|".join(STAGES), re.IGNORECASE)
SKIPPED = ("CHANGELOG.md", "datasets/", "tests/unit/test_no_history.py")


def stage_references(text: str) -> list[str]:
    """Every numbered development stage named in ``text``, as matched."""
    return [m.group(0) for m in PATTERN.finditer(text)]


def _tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    names = [n for n in out.stdout.decode().split("\0") if n]
    return [ROOT / n for n in names if not n.startswith(SKIPPED)]


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:  # listed by git but deleted in the work tree
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


# The examples carry N where the number goes, so that this file holds no reference itself.
@pytest.mark.parametrize(
    "sentence",
    [
        "the default until session N",
        "chosen in sessions N-22",
        "records of report run N",
        "run N's rounds",
        "runs N and 8 saved",
        "asked by issue #N",
        "Issue N asks",
        "in turn N of the review",
        "since issue N's choice",
        "see molecules_reportN.md",
    ],
)
def test_pattern_finds_stages(sentence):
    assert stage_references(sentence.replace("N", "17")), sentence


@pytest.mark.parametrize(
    "sentence",
    [
        "an ensemble of 3 models trained on seeds 0-4",
        "each run writes metrics.json",
        "runs 3 members in turn",
        "the test set is read once per release",
        "a session of torchrun on 2 processes",
    ],
)
def test_pattern_leaves_plain_prose(sentence):
    assert stage_references(sentence) == [], sentence


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout to list the tracked files")
def test_tracked_files_name_no_development_stage():
    found = []
    for path in _tracked_files():
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for ref in stage_references(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {ref!r}")
    assert found == [], f"{len(found)} references to development stages:\n" + "\n".join(found[:50])
