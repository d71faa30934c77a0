"""Molecules -> Data: feature values, topologies, fragments, errors, and real data sets."""

from __future__ import annotations

import csv

import pytest
import torch
from rdkit import Chem
from torch_geometric.data import Batch

from setattn.datasets import DATASETS_DIR
from setattn.domains.molecules import (
    ATOM_FEATURE_DIM,
    BOND_FEATURE_DIM,
    InvalidSmilesError,
    atom_feature_names,
    bond_feature_names,
    keep_largest_fragment,
    mol_to_data,
)

ATOM_NAMES = atom_feature_names()
BOND_NAMES = bond_feature_names()
ATOM_GROUPS = ("element", "degree", "formal_charge", "hybridisation", "num_hs", "chirality")


def hot_atom(data, atom: int) -> set[str]:
    return {ATOM_NAMES[k] for k in data.x[atom].nonzero().view(-1).tolist()}


def hot_bond(data, edge: int) -> set[str]:
    return {BOND_NAMES[k] for k in data.edge_attr[edge].nonzero().view(-1).tolist()}


def smiles_column(name: str) -> list[str]:
    with open(DATASETS_DIR / "molecules" / name, newline="") as handle:
        return [row["smiles"] for row in csv.DictReader(handle)]


def test_feature_names_describe_every_column():
    assert len(ATOM_NAMES) == ATOM_FEATURE_DIM == 59
    assert len(BOND_NAMES) == BOND_FEATURE_DIM == 14
    assert len(set(ATOM_NAMES)) == ATOM_FEATURE_DIM
    assert len(set(BOND_NAMES)) == BOND_FEATURE_DIM
    assert "element=other" in ATOM_NAMES and "num_hs=4+" in ATOM_NAMES


def test_ethanol_atoms_and_bonds():
    data = mol_to_data("CCO")
    assert data.x.shape == (3, ATOM_FEATURE_DIM) and data.x.dtype == torch.float32
    assert hot_atom(data, 2) == {
        "element=O",
        "degree=1",
        "formal_charge=0",
        "hybridisation=SP3",
        "num_hs=1",
        "chirality=none",
    }
    assert hot_atom(data, 1) >= {"element=C", "degree=2", "num_hs=2"}
    # bond k -> edges 2k (begin -> end) and 2k + 1 (end -> begin)
    assert data.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    assert data.edge_attr.shape == (4, BOND_FEATURE_DIM)
    assert hot_bond(data, 0) == {"bond_type=SINGLE", "stereo=STEREONONE"}
    assert torch.equal(data.edge_attr[0], data.edge_attr[1])
    assert data.smiles == "CCO"


def test_aromatic_ring_flags():
    data = mol_to_data("c1ccccc1O")  # phenol
    assert {"aromatic", "in_ring", "hybridisation=SP2"} <= hot_atom(data, 0)
    assert "aromatic" not in hot_atom(data, 6) and "in_ring" not in hot_atom(data, 6)
    assert hot_bond(data, 0) == {"bond_type=AROMATIC", "conjugated", "in_ring", "stereo=STEREONONE"}
    assert data.edge_index.shape == (2, 14)


def test_charge_hydrogens_and_single_atom():
    data = mol_to_data("[NH4+]")
    assert hot_atom(data, 0) >= {"element=N", "formal_charge=+1", "num_hs=4+", "degree=0"}
    assert data.edge_index.shape == (2, 0) and data.edge_index.dtype == torch.long
    assert data.edge_attr.shape == (0, BOND_FEATURE_DIM)
    assert mol_to_data("C", graph="complete").dist.tolist() == [0]


def test_unknown_element_goes_to_other():
    data = mol_to_data("[Au]")
    assert "element=other" in hot_atom(data, 0)
    elements = [name for name in hot_atom(data, 0) if name.startswith("element=")]
    assert elements == ["element=other"]


def test_chirality_and_double_bond_stereo():
    # the CIP label, whatever the order the neighbours are written in: L-alanine is S
    for smiles in ("C[C@H](N)C(=O)O", "N[C@@H](C)C(=O)O", "OC(=O)[C@@H](N)C"):
        data = mol_to_data(smiles)
        chiral = [i for i in range(data.num_nodes) if "chirality=none" not in hot_atom(data, i)]
        assert len(chiral) == 1 and "chirality=S" in hot_atom(data, chiral[0]), smiles
    assert "chirality=R" in hot_atom(mol_to_data("C[C@@H](N)C(=O)O"), 1)  # D-alanine
    # a specified centre without an R/S label (ring cis/trans) is "other"
    ring = mol_to_data("C[C@H]1CC[C@@H](C)CC1")
    assert "chirality=other" in hot_atom(ring, 1) and "chirality=other" in hot_atom(ring, 4)
    trans = mol_to_data("C/C=C/C")
    cis = mol_to_data("C/C=C\\C")
    assert "stereo=STEREOE" in hot_bond(trans, 2)  # bond 1 is the double bond
    assert "stereo=STEREOZ" in hot_bond(cis, 2)
    assert "bond_type=DOUBLE" in hot_bond(trans, 2)


def test_one_hot_groups_have_exactly_one_hot_column():
    data = Batch.from_data_list([mol_to_data(s) for s in smiles_column("freesolv.csv")])
    for group in ATOM_GROUPS:
        columns = [k for k, name in enumerate(ATOM_NAMES) if name.startswith(group + "=")]
        assert torch.equal(data.x[:, columns].sum(1), torch.ones(data.num_nodes)), group


def test_smiles_fast_path_equals_reading_the_mol():
    """SMILES input skips chirality/stereo calls when the text has no @, / or \\."""
    tox21 = smiles_column("tox21.csv")
    stereo = [s for s in tox21 if "@" in s or "/" in s or "\\" in s][:300]
    plain = smiles_column("freesolv.csv")
    assert len(stereo) == 300
    for smiles in stereo + plain:
        mol = Chem.MolFromSmiles(smiles)
        from_text = mol_to_data(smiles, largest_fragment=False)
        from_mol = mol_to_data(mol, largest_fragment=False)
        assert torch.equal(from_text.x, from_mol.x), smiles
        assert torch.equal(from_text.edge_index, from_mol.edge_index), smiles
        assert torch.equal(from_text.edge_attr, from_mol.edge_attr), smiles


def test_same_graph_as_pyg_from_smiles():
    from torch_geometric.utils import from_smiles

    for smiles in smiles_column("freesolv.csv")[:200]:
        ours = mol_to_data(smiles)
        ref = from_smiles(smiles)
        assert ours.num_nodes == ref.num_nodes, smiles
        assert set(map(tuple, ours.edge_index.t().tolist())) == set(
            map(tuple, ref.edge_index.t().tolist())
        ), smiles


def test_largest_fragment_drops_counter_ions():
    salt = "[Na+].CC(=O)[O-]"
    data = mol_to_data(salt)
    assert data.num_nodes == 4
    assert hot_atom(data, 3) >= {"element=O", "formal_charge=-1"}
    assert mol_to_data(salt, largest_fragment=False).num_nodes == 5
    # kept atoms stay in their original relative order
    mol = Chem.MolFromSmiles("OCC.c1ccccc1Cl")
    kept = keep_largest_fragment(mol)
    assert [a.GetSymbol() for a in kept.GetAtoms()] == ["C"] * 6 + ["Cl"]
    assert keep_largest_fragment(Chem.MolFromSmiles("CCO")).GetNumAtoms() == 3


def test_complete_graph_distances_target_major():
    data = mol_to_data("CC(C)O", graph="complete")
    n = 4
    assert "edge_index" not in data
    assert data.dist.shape == (n * n,) and data.dist.dtype == torch.long
    expected = torch.from_numpy(Chem.GetDistanceMatrix(Chem.MolFromSmiles("CC(C)O"))).long()
    assert torch.equal(data.dist.view(n, n), expected)
    assert data.dist.view(n, n)[0].tolist() == [0, 1, 2, 2]  # target atom 0, sources 0..3
    # no path between fragments: distance N
    apart = mol_to_data("CC.O", graph="complete", largest_fragment=False)
    assert apart.dist.view(3, 3).tolist() == [[0, 1, 3], [1, 0, 3], [3, 3, 0]]


def test_complete_graphs_batch():
    batch = Batch.from_data_list([mol_to_data(s, graph="complete") for s in ["CCO", "C", "CCCC"]])
    assert batch.num_nodes == 8
    assert batch.dist.shape == (9 + 1 + 16,)
    assert batch.ptr.tolist() == [0, 3, 4, 8]


@pytest.mark.parametrize(
    ("smiles", "reason"),
    [("", "empty SMILES"), ("   ", "empty SMILES"), ("C1CC", "syntax"), ("c1cccc1", "kekulize"),
     ("C CO", "read only 'C'"), ("CCCC\tO", "whitespace inside")],
)
def test_invalid_smiles_error(smiles, reason):
    with pytest.raises(InvalidSmilesError) as info:
        mol_to_data(smiles, row=41, source="mine.csv")
    err = info.value
    assert isinstance(err, ValueError)
    assert err.smiles == smiles and err.row == 41 and err.source == "mine.csv"
    assert reason.lower() in str(err).lower()
    assert f"invalid SMILES {smiles!r} in row 41 of mine.csv" in str(err)


def test_surrounding_whitespace_is_ignored():
    assert mol_to_data("  CCO\t").num_nodes == 3


def test_invalid_smiles_without_row():
    with pytest.raises(InvalidSmilesError, match="valence") as info:
        mol_to_data("O[AlH3](O)O")
    assert info.value.row is None


def test_bad_arguments():
    with pytest.raises(TypeError, match="smiles_or_mol"):
        mol_to_data(42)
    with pytest.raises(ValueError, match="graph"):
        mol_to_data("CCO", graph="dense")
    with pytest.raises(ValueError, match="no atoms"):
        mol_to_data(Chem.Mol())


def test_docstring_examples():
    import doctest

    from setattn.domains import molecules

    result = doctest.testmod(molecules, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_size_limit_and_time_budget_skip_a_molecule_with_the_reason():
    from setattn.domains.molecules import MoleculeSkippedError

    chain = "C" * 301
    with pytest.raises(MoleculeSkippedError, match="301 heavy atoms, above the limit of 300") \
            as err:
        mol_to_data(chain, max_heavy_atoms=300, row=4, source="x.csv")
    assert err.value.row == 4 and err.value.smiles == chain
    assert "(301 characters)" in str(err.value)  # a long SMILES is shortened in messages
    # the limit is named for Python callers and the command line alike
    assert "(max_heavy_atoms; on the command line --max-heavy-atoms)" in str(err.value)
    with pytest.raises(MoleculeSkippedError, match="not read") as err:
        mol_to_data("C" * 200, max_heavy_atoms=5)
    assert "limit of 5 heavy atoms (max_heavy_atoms; on the command line" in str(err.value)
    # the largest fragment is what counts: a big counter-ion mixture of small parts is fine
    assert mol_to_data(".".join(["CCO"] * 200), max_heavy_atoms=300).num_nodes == 3
    # a budget of 0 s stops the descriptors after the first one
    with pytest.raises(MoleculeSkippedError, match="took over 0 s, the time budget"):
        mol_to_data("CCO", descriptors=True, time_budget=0.0)
    assert mol_to_data("CCO", descriptors=True, time_budget=60.0).descriptors.shape[0] == 1


def test_fragment_note_names_what_was_dropped():
    from setattn.domains.molecules import fragment_note

    assert fragment_note("CCO") == "" and fragment_note("C1.C1") == ""  # one molecule
    assert fragment_note("CC(=O)[O-].[Na+]") == \
        "2 fragments: the largest (4 atoms) is featurised, dropped '[Na+]'"
