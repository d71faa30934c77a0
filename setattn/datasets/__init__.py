"""Loaders for the data sets in ``datasets/`` and for your own files in the same formats.

Generic loaders (your files):

- ``load_molecule_csv(path, smiles_column, target_columns)``: one ``Data`` per
  parsable molecule, missing labels as NaN, plus the rows that failed and why.
- ``load_molecule_sdf(path, target_properties)``: the same for an SD file.
- ``load_planetoid(root, name)``: a Planetoid citation graph, from the raw
  ``ind.<name>.*`` files or from a ``<name>.npz`` written by ``convert_planetoid``.
- ``load_text_csv(path, text_column, label_column)``: texts and class indices.
- ``load_labelled_lines(path, classes)``: the same from ``LABEL text`` lines.
- ``load_image_csv(path, height, width)``: images (pixels then label, one a row).

Named shortcuts for the bundled sets (files under ``datasets/``, see its README):
``load_freesolv``, ``load_esol``, ``load_tox21``, ``load_solubility``, ``load_cora``,
``load_mr``, ``load_trec``, ``load_cr``, ``load_digits``, ``load_mnist5k``.

Modules: ``molecules``, ``planetoid``, ``text``, ``images`` (one format each),
``bundled`` (the shortcuts), ``files`` (shared file helpers) and ``safe_pickle``.

Nothing here unpickles: the raw Planetoid files are pickles, and they are read by
``safe_pickle._decode_pickle``, which walks the opcodes with ``pickletools`` and
rebuilds only plain data (numbers, strings, lists, dicts, NumPy arrays, SciPy CSR/CSC
matrices as their arrays). It never imports a module or calls anything named in the file.
"""

from setattn.datasets.bundled import (
    DATASETS_DIR,
    TOX21_TASKS,
    TREC_CLASSES,
    load_cora,
    load_cr,
    load_digits,
    load_esol,
    load_freesolv,
    load_mnist5k,
    load_mr,
    load_solubility,
    load_tox21,
    load_trec,
)
from setattn.datasets.images import ImageSet, load_image_csv
from setattn.datasets.planetoid import convert_planetoid, load_planetoid
from setattn.datasets.text import TextSet, load_labelled_lines, load_text_csv

try:  # RDKit is optional (setattn[molecules]); the other loaders work without it
    from setattn.datasets.molecules import MoleculeSet, load_molecule_csv, load_molecule_sdf
except ModuleNotFoundError as err:
    if err.name != "rdkit":
        raise

    def __getattr__(name: str) -> object:
        """The RDKit names of ``__all__`` when RDKit is not installed: say what to install."""
        if name in __all__:
            message = f"setattn.datasets.{name} needs RDKit: pip install 'setattn[molecules]'"
            raise ModuleNotFoundError(message, name="rdkit")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DATASETS_DIR",
    "TOX21_TASKS",
    "TREC_CLASSES",
    "ImageSet",
    "MoleculeSet",
    "TextSet",
    "convert_planetoid",
    "load_cora",
    "load_cr",
    "load_digits",
    "load_esol",
    "load_freesolv",
    "load_image_csv",
    "load_labelled_lines",
    "load_mnist5k",
    "load_molecule_csv",
    "load_molecule_sdf",
    "load_mr",
    "load_planetoid",
    "load_solubility",
    "load_text_csv",
    "load_tox21",
    "load_trec",
]
