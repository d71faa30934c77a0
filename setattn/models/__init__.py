"""Ready models built from setattn layers."""

from setattn.models.molecule import MoleculeModel, MoleculeModelConfig

__all__ = ["MoleculeModel", "MoleculeModelConfig"]
