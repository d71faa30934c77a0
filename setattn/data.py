"""Temporary alias of ``setattn.datasets``, to be removed.

The loaders moved to the package ``setattn.datasets``. This module only re-exports
them (and the file helpers ``setattn.moldata`` still imports from here) until its
last importers (``setattn/moldata.py``, being rewritten) import ``setattn.datasets``.
It holds no logic. Import from ``setattn.datasets`` in new code.
"""

from setattn.datasets import (
    DATASETS_DIR,
    TOX21_TASKS,
    ImageSet,
    MoleculeSet,
    TextSet,
    convert_planetoid,
    load_cora,
    load_digits,
    load_esol,
    load_freesolv,
    load_image_csv,
    load_mnist5k,
    load_molecule_csv,
    load_molecule_sdf,
    load_mr,
    load_planetoid,
    load_solubility,
    load_text_csv,
    load_tox21,
)
from setattn.datasets.files import (
    PathLike,
    _as_list,
    _check_columns,
    _existing_file,
    _open_text,
    _parse_target,
)

__all__ = [
    "DATASETS_DIR",
    "TOX21_TASKS",
    "ImageSet",
    "MoleculeSet",
    "PathLike",
    "TextSet",
    "_as_list",
    "_check_columns",
    "_existing_file",
    "_open_text",
    "_parse_target",
    "convert_planetoid",
    "load_cora",
    "load_digits",
    "load_esol",
    "load_freesolv",
    "load_image_csv",
    "load_mnist5k",
    "load_molecule_csv",
    "load_molecule_sdf",
    "load_mr",
    "load_planetoid",
    "load_solubility",
    "load_text_csv",
    "load_tox21",
]
