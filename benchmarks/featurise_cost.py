"""Where a drug-like molecule's featurisation time goes, and the floor it sets.

A table for ``benchmarks/predict.py``. ``mol_to_data`` with the ``rdkit`` descriptor set
spends its time on the atom graph, on 206 RDKit descriptors and on a Morgan count
fingerprint. Some of those descriptors RDKit computes in C++, one call each: the ones
``rdkit.Chem.rdMolDescriptors`` offers as ``Calc<name>`` (path, shape and ring indices,
counts, TPSA) and the 85 ``fr_`` substructure counts, which are SMARTS matches. No Python
rewrite makes those faster and keeps their values. The table times each part alone
(interleaved rounds, medians) on fresh copies of the parsed molecules. Its last row adds
the atom graph to the C++ parts: it is a lower bound on the cost of one molecule with
this descriptor set, before the Python descriptors, the model and the output.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from rdkit import Chem, rdBase
from rdkit.Chem import rdMolDescriptors
from record import interleaved_seconds, table

from setattn.domains.descriptors import mol_descriptors, set_functions
from setattn.domains.fingerprints import count_fingerprint
from setattn.domains.molecules import InvalidSmilesError, mol_to_data


@functools.cache
def cpp_functions() -> tuple[tuple[str, Callable[[Chem.Mol], object]], ...]:
    """(name, ``rdMolDescriptors.Calc<name>``) for the ``rdkit`` set's descriptors that
    RDKit computes in C++ under that name."""
    names = (name for name, _ in set_functions("rdkit"))
    return tuple((name, getattr(rdMolDescriptors, f"Calc{name}")) for name in names
                 if hasattr(rdMolDescriptors, f"Calc{name}"))


@functools.cache
def fragment_patterns() -> tuple[Chem.Mol, ...]:
    """The SMARTS query of each ``fr_`` descriptor of the ``rdkit`` set."""
    from rdkit.Chem import Fragments

    patterns = {name: fn.__defaults__[1] for name, fn in Fragments.fns}  # (unique, pattern)
    return tuple(patterns[name] for name, _ in set_functions("rdkit") if name in patterns)


def _each(mols: list[Chem.Mol], fn: Callable[[Chem.Mol], object]) -> Callable[[], None]:
    """One pass of ``fn`` over fresh copies of ``mols`` (RDKit caches on a molecule)."""
    def run() -> None:
        with rdBase.BlockLogs():
            for m in mols:
                fn(Chem.Mol(m))
    return run


def _graphs(smiles: list[str]) -> Callable[[], None]:
    def run() -> None:
        for s in smiles:
            try:
                mol_to_data(s)
            except InvalidSmilesError:
                continue
    return run


def _cpp_descriptors(mol: Chem.Mol) -> None:
    for _, fn in cpp_functions():
        fn(mol)


def _fragment_counts(mol: Chem.Mol) -> None:
    for pattern in fragment_patterns():
        len(mol.GetSubstructMatches(pattern, uniquify=True))


def cost_table(smiles: list[str], repeats: int) -> tuple[dict, dict]:
    """Milliseconds per molecule of each part of featurisation; (table, raw seconds)."""
    with rdBase.BlockLogs():
        mols = [m for m in (Chem.MolFromSmiles(s) for s in smiles) if m is not None]
    for m in mols:
        Chem.FastFindRings(m)
    cpp = f"of which C++: rdMolDescriptors.Calc<name> ({len(cpp_functions())})"
    fragments = f"of which C++: fr_ SMARTS counts ({len(fragment_patterns())})"
    cases = {
        "atom graph (parse, atoms, bonds)": _graphs(smiles),
        f"rdkit descriptor set ({len(set_functions('rdkit'))})": _each(mols, mol_descriptors),
        cpp: _each(mols, _cpp_descriptors),
        fragments: _each(mols, _fragment_counts),
        "Morgan count fingerprint": _each(mols, count_fingerprint),
    }
    median = interleaved_seconds(cases, repeats)
    ms = {name: s / len(mols) * 1e3 for name, s in median.items()}
    ms["floor: atom graph + the C++ parts"] = (
        ms["atom graph (parse, atoms, bonds)"] + ms[cpp] + ms[fragments])
    rows = [[name, f"{v:.3f}", f"{1e3 / v:,.0f}"] for name, v in ms.items()]
    return table(f"Featurisation of {len(mols)} drug-like molecules, part by part",
                 ["part", "ms per molecule", "mol/s if it were all"], rows,
                 f"median of {repeats} interleaved rounds on fresh copies of the parsed "
                 "molecules; the C++ parts are RDKit's own calls, which no rewrite in Python "
                 "makes faster, so the floor bounds one core's featurisation with this "
                 "descriptor set from above (in mol/s)"), ms
