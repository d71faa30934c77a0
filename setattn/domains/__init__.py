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
from setattn.domains.text import (
    Tokenizer,
    Vocabulary,
    document_to_data,
    documents_to_batch,
    window_edge_index,
)

try:  # RDKit is optional (setattn[molecules]); the text, image and graph builders work without it
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
except ModuleNotFoundError as err:
    if err.name != "rdkit":
        raise

    def __getattr__(name: str) -> object:
        """The RDKit names of ``__all__`` when RDKit is not installed: say what to install."""
        if name in __all__:
            message = f"setattn.domains.{name} needs RDKit: pip install 'setattn[molecules]'"
            raise ModuleNotFoundError(message, name="rdkit")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
