"""datasets/pretrain_corpus.py: BRICS pieces capped with hydrogen, and a seeded corpus of
whole molecules and distinct pieces."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest
from rdkit import Chem

DATASETS = Path(__file__).resolve().parents[2] / "datasets"
SMILES = ["CCCS(=O)c1ccc2[nH]c(=NC(=O)OC)[nH]c2c1", "COc1ccc(CNC(=O)c2ccccc2Cl)cc1",
          "CC(C)Oc1ccc(C(=O)N2CCN(C)CC2)cc1", "O=C(Nc1ccccc1)c1ccco1", "CCO",
          "Cc1ccc(S(=O)(=O)N2CCOCC2)cc1", "N#Cc1ccc(OCC(=O)NC2CC2)cc1"]


@pytest.fixture()
def pc(monkeypatch):
    monkeypatch.syspath_prepend(str(DATASETS))
    import pretrain_corpus

    return pretrain_corpus


def test_a_cut_end_becomes_a_hydrogen(pc):
    assert pc.capped("[3*]OC") == "CO"
    assert pc.capped("[16*]c1ccccc1") == "c1ccccc1"
    assert pc.capped("[8*]C(=O)[6*]") == "C=O"
    assert pc.capped("not a piece") is None


def test_pieces_are_capped_molecules_and_never_the_molecule_itself(pc):
    found = pc.pieces(SMILES[1])
    assert found and all("*" not in p and Chem.MolFromSmiles(p) for p in found)
    whole = Chem.MolFromSmiles(SMILES[1]).GetNumHeavyAtoms()
    assert all(Chem.MolFromSmiles(p).GetNumHeavyAtoms() < whole for p in found)
    assert pc.pieces("CCO") == set()  # no BRICS bond
    assert pc.pieces("C1CC") == set()  # does not parse


def test_the_corpus_is_seeded_whole_molecules_then_distinct_new_pieces(pc):
    out, n_pieces = pc.corpus(SMILES, 3, 4, seed=1, progress=False)
    again, _ = pc.corpus(SMILES, 3, 4, seed=1, progress=False)
    assert out == again and len(out) == 3 + n_pieces and n_pieces > 0
    assert len(set(out)) == len(out)  # no piece repeats a molecule or another piece
    assert len(set(out) & set(SMILES)) == 3  # the whole molecules drawn
    with pytest.raises(ValueError, match="--whole 6 and --cut 4"):
        pc.corpus(SMILES, 6, 4, seed=1, progress=False)


def test_main_writes_a_gzipped_csv_of_smiles(pc, tmp_path, capsys):
    moses = tmp_path / "train.csv"
    moses.write_text("SMILES\n" + "\n".join(SMILES) + "\n")
    out = tmp_path / "corpus.csv.gz"
    pc.main(["--moses", str(moses), "--whole", "2", "--cut", "5", "--output", str(out)])
    with gzip.open(out, "rt", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["smiles"] and len(rows) > 3
    assert f"wrote {len(rows) - 1:,} SMILES (2 whole molecules" in capsys.readouterr().out
    again = tmp_path / "again.csv.gz"
    pc.main(["--moses", str(moses), "--whole", "2", "--cut", "5", "--output", str(again)])
    assert again.read_bytes() == out.read_bytes()  # the same arguments, the same bytes
    with pytest.raises(SystemExit):
        pc.main(["--moses", str(moses), "--output", str(tmp_path / "corpus.csv")])
