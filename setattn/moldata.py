"""Deprecated alias: featurisation and batching moved to ``setattn.molprop.featurize``
and ``setattn.molprop.batching`` (see CHANGELOG.md).

Importing this module warns (``DeprecationWarning``); it will be removed in 0.3.
"""

import warnings

from setattn.molprop.batching import PackedMolecules, collate_molecules
from setattn.molprop.featurize import FEATURIZER_VERSION, PARALLEL_MIN, cache_dir, featurize_csv

__all__ = ["FEATURIZER_VERSION", "PARALLEL_MIN", "PackedMolecules", "cache_dir",
           "collate_molecules", "featurize_csv"]

warnings.warn("setattn.moldata is deprecated: import from setattn.molprop instead "
              "(see CHANGELOG.md)", DeprecationWarning, stacklevel=2)
