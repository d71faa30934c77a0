"""Domain builders: raw documents, molecules, images and networkx graphs -> PyG ``Data``.

Each builder returns ordinary ``torch_geometric.data.Data`` objects, so that PyG's
``Batch`` and ``DataLoader`` batch them and every setattn layer reads them.

- ``text``: ``Tokenizer``, ``Vocabulary``, ``document_to_data`` (word sets).
- ``molecules``: ``mol_to_data`` (atom graphs or atom sets with distances).
- ``images``: ``image_to_patches`` / ``patches_to_image`` (patch sets).
- ``graphs``: ``from_networkx`` / ``to_networkx`` / ``attention_to_networkx``.
"""

from setattn.domains.graphs import attention_to_networkx, from_networkx, to_networkx
from setattn.domains.images import (
    grid_edge_index,
    image_to_patches,
    images_to_batch,
    patch_values_to_image,
    patches_to_image,
)
from setattn.domains.molecules import (
    ATOM_FEATURE_DIM,
    BOND_FEATURE_DIM,
    InvalidSmilesError,
    atom_feature_names,
    bond_feature_names,
    keep_largest_fragment,
    mol_to_data,
    parse_smiles,
)
from setattn.domains.text import (
    Tokenizer,
    Vocabulary,
    document_to_data,
    documents_to_batch,
    window_edge_index,
)

__all__ = [
    "ATOM_FEATURE_DIM",
    "BOND_FEATURE_DIM",
    "InvalidSmilesError",
    "Tokenizer",
    "Vocabulary",
    "atom_feature_names",
    "attention_to_networkx",
    "bond_feature_names",
    "document_to_data",
    "documents_to_batch",
    "from_networkx",
    "grid_edge_index",
    "image_to_patches",
    "images_to_batch",
    "keep_largest_fragment",
    "mol_to_data",
    "parse_smiles",
    "patch_values_to_image",
    "patches_to_image",
    "to_networkx",
    "window_edge_index",
]
