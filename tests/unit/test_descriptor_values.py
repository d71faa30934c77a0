"""Every descriptor set gives the values it gave when ``tests/data/descriptor_values.json``
was written, to the bit (all but AvgIpc, see ``BLAS_DEPENDENT``), and the per-atom
shares are unchanged.

The stored molecules are drawn from the bundled CSV sets (small and large, charged,
aromatic, salts, stereo, metals) plus a few edge cases; each is prepared as
``mol_to_data`` prepares it (``parse_smiles``, then ``keep_largest_fragment`` unless
``whole``). The values are RDKit-version specific: with another RDKit the test is
skipped. Rewrite the file after an intended change with
``python tests/unit/test_descriptor_values.py`` (and say why in the commit).
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from rdkit import Chem, rdBase

from setattn.chem.descriptors import (
    DESCRIPTOR_SETS,
    descriptor_values,
    mol_descriptors,
    set_functions,
)
from setattn.chem.shares import descriptor_shares
from setattn.datasets import DATASETS_DIR
from setattn.domains.molecules import keep_largest_fragment, parse_smiles

STORED = Path(__file__).resolve().parents[1] / "data" / "descriptor_values.json"

# RDKit's AvgIpc takes the characteristic polynomial of the adjacency matrix from numpy
# matrix products, whose last digits depend on the BLAS kernel the CPU selects: on the
# largest stored molecule (147 heavy atoms) an AMD EPYC machine gives 0.84208809 where an
# Intel Xeon gave 0.84209026 (2.6e-6 relative). It is compared to this relative tolerance;
# every other value is compared to the bit.
BLAS_DEPENDENT = {"AvgIpc": 1e-4}


def _differing(names: list[str], ours: np.ndarray, expected: np.ndarray) -> list[str]:
    """The names whose values differ: to the bit (NaN equal to NaN), or beyond the
    relative tolerance of ``BLAS_DEPENDENT``."""
    rtol = np.array([BLAS_DEPENDENT.get(name, 0.0) for name in names])  # (F_desc,)
    same = np.isclose(ours, expected, rtol=rtol, atol=0, equal_nan=True)
    return [names[k] for k in np.flatnonzero(~same)]

PICKED = [  # (CSV, row, what it adds)
    ("freesolv", 0, "small neutral"), ("freesolv", 10, "halogens, 3 atoms"),
    ("freesolv", 21, "P=S esters"), ("freesolv", 70, "nitro ester, charges"),
    ("delaney-processed", 0, "delaney"), ("delaney-processed", 300, "delaney"),
    ("delaney-processed", 900, "delaney"),
    ("bace1_chembl", 0, "large peptide, stereo"), ("bace1_chembl", 77, "147 heavy atoms"),
    ("bace1_chembl", 172, "E/Z and R/S"), ("bace1_chembl", 180, "TFA salt"),
    ("bace1_chembl", 1434, "benzothiazole, furan"), ("bace1_chembl", 5279, "fused, stereo"),
    ("bace1_chembl", 5466, "HCl salt, imine E/Z"),
    ("tox21", 9, "zinc salt"), ("tox21", 595, "steroid oxime"),
    ("tox21", 973, "large peptide"), ("tox21", 1048, "nitro aromatic"),
    ("tox21", 1727, "copper salt, thiolate"), ("tox21", 2897, "two equal fragments"),
    ("tox21", 3106, "aziridines, P=S"), ("tox21", 3188, "E dibromide"),
    ("tox21", 3393, "zinc bonded, N-oxide"), ("tox21", 3406, "dication"),
    ("tox21", 4752, "rifampicin: macrocycle"), ("tox21", 5564, "delocalised cation"),
    ("tox21", 5665, "organotin"), ("tox21", 5712, "phosphate"),
    ("tox21", 5722, "two equal stereo fragments"),
]
EDGE_CASES = [("[Na+]", "one ion"), ("C", "one atom"), ("[CH2]C", "radical"),
              ("[Se]=C=[Se]", "selenium"), ("B1OC(C)(C)C(C)(C)O1", "boron ring"),
              ("C1CC2CCC1C2", "bridged")]
WHOLE = [("CC(=O)Oc1ccccc1C(=O)O.[Na+].[Cl-]", "salt kept whole"),
         ("C1CCOC1.c1ccccc1CC1CC1", "mixture kept whole")]


def prepared(smiles: str, whole: bool) -> Chem.Mol:
    """The molecule ``mol_to_data`` computes the descriptors of, freshly parsed."""
    mol = parse_smiles(smiles)
    return mol if whole else keep_largest_fragment(mol)


def shares_digest(smiles: str, whole: bool, values: np.ndarray, kind: str) -> dict:
    """SHA-256 of the (N, F_desc) float64 shares' bytes, and the additive flags as 0/1."""
    shares, additive = descriptor_shares(prepared(smiles, whole), values, kind)
    data = np.ascontiguousarray(shares, dtype=np.float64).tobytes()
    return {"sha256": hashlib.sha256(data).hexdigest(),
            "additive": "".join("1" if a else "0" for a in additive)}


def row_values(values: list[float]) -> np.ndarray:
    """(F_desc,) float32 as ``mol_descriptors`` returns them: non-finite and beyond
    float32 become 0."""
    row = np.array(values, dtype=np.float64)
    return np.nan_to_num(np.where(np.abs(row) < 1e30, row, 0.0)).astype(np.float32)


def molecules() -> list[dict]:
    """The stored molecules: SMILES, where each came from, and whether it is kept whole."""
    tables: dict[str, list[str]] = {}
    out = []
    for name, row, why in PICKED:
        if name not in tables:
            with open(DATASETS_DIR / "molecules" / f"{name}.csv", newline="") as handle:
                tables[name] = [r["smiles"] for r in csv.DictReader(handle)]
        out.append({"smiles": tables[name][row], "source": f"{name}.csv row {row}",
                    "why": why, "whole": False})
    out += [{"smiles": s, "source": "edge case", "why": why, "whole": False}
            for s, why in EDGE_CASES]
    out += [{"smiles": s, "source": "edge case", "why": why, "whole": True} for s, why in WHOLE]
    return out


def write() -> None:
    """Compute and store the values and share digests of every molecule and set."""
    stored = {"rdkit_version": rdBase.rdkitVersion,
              "sets": {kind: [name for name, _ in set_functions(kind)]
                       for kind in DESCRIPTOR_SETS},
              "molecules": molecules()}
    for entry in stored["molecules"]:
        entry["values"], entry["shares"] = {}, {}
        for kind in DESCRIPTOR_SETS:
            values = descriptor_values(prepared(entry["smiles"], entry["whole"]), kind).tolist()
            entry["values"][kind] = values
            entry["shares"][kind] = shares_digest(entry["smiles"], entry["whole"],
                                                  row_values(values).astype(np.float64), kind)
    STORED.write_text(json.dumps(stored, indent=1) + "\n")


@pytest.fixture(scope="module")
def stored() -> dict:
    data = json.loads(STORED.read_text())
    if data["rdkit_version"] != rdBase.rdkitVersion:
        pytest.skip(f"values stored with RDKit {data['rdkit_version']}, "
                    f"this is {rdBase.rdkitVersion}")
    return data


def test_the_sets_keep_their_names_and_order(stored):
    assert list(stored["sets"]) == list(DESCRIPTOR_SETS)
    for kind, names in stored["sets"].items():
        assert [name for name, _ in set_functions(kind)] == names, kind


def test_enough_varied_molecules_are_stored(stored):
    entries = stored["molecules"]
    assert len(entries) >= 30
    assert sum("." in e["smiles"] for e in entries) >= 6
    assert sum("@" in e["smiles"] for e in entries) >= 6
    assert max(parse_smiles(e["smiles"]).GetNumHeavyAtoms() for e in entries) > 100


@pytest.mark.parametrize("kind", ["rdkit", "lean", "fast"])
def test_every_value_is_the_stored_one(stored, kind):
    names = stored["sets"][kind]
    for entry in stored["molecules"]:
        ours = mol_descriptors(prepared(entry["smiles"], entry["whole"]), kind=kind)[0].numpy()
        expected = row_values(entry["values"][kind])
        differ = _differing(names, ours, expected)
        assert not differ, f"{entry['smiles']} ({kind}): {differ}"


@pytest.mark.parametrize("kind", ["rdkit", "lean", "fast"])
def test_every_float64_value_is_the_stored_one(stored, kind):
    names = stored["sets"][kind]
    for entry in stored["molecules"]:
        ours = descriptor_values(prepared(entry["smiles"], entry["whole"]), kind)
        expected = np.array(entry["values"][kind], dtype=np.float64)
        differ = _differing(names, ours, expected)
        assert not differ, f"{entry['smiles']} ({kind}): {differ}"


@pytest.mark.parametrize("kind", ["rdkit", "lean", "fast"])
def test_every_atom_share_is_the_stored_one(stored, kind):
    for entry in stored["molecules"]:
        values = row_values(entry["values"][kind]).astype(np.float64)
        ours = shares_digest(entry["smiles"], entry["whole"], values, kind)
        assert ours == entry["shares"][kind], f"{entry['smiles']} ({kind})"


if __name__ == "__main__":
    sys.exit(write())
