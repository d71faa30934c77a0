"""The pretrained encoder shipped in the package, and what ``default`` names.

``setattn/molprop/encoders/moses_pieces20.pt`` is the encoder of ``setattn pretrain``
trained for 20 epochs on 204,891 molecules: 200,000 of the MOSES training set and the
distinct BRICS pieces of 150,000 others (no labelled set); 192 wide, 3 GAT layers, 4
heads. Its record (``moses_pieces20.json`` beside it) names the corpus by SHA-256 and holds
the command, every epoch's losses and the seconds it took. The package carries the file,
so nothing is downloaded; its SHA-256 is checked before it is read.

``--pretrained default`` and ``--kernel-vectors default`` name it; any other value is the
path of an ``encoder.pt``.
"""

from __future__ import annotations

from pathlib import Path

from setattn.datasets.files import file_sha256
from setattn.molprop.checkpoint import CheckpointError

__all__ = ["DEFAULT", "DEFAULT_ENCODER", "DEFAULT_SHA256", "encoder_path"]

DEFAULT = "default"
"""The value of ``--pretrained`` and ``--kernel-vectors`` that names the shipped encoder."""

DEFAULT_ENCODER = Path(__file__).parent / "encoders" / "moses_pieces20.pt"
DEFAULT_SHA256 = "6165038d5b1d15d46cea6e111218da886c168bf8f70c86676e7fdc62f1d365a8"


def encoder_path(value: str | Path) -> Path:
    """The encoder file a setting names: the shipped one, checked, for ``default``;
    else the path itself (read and checked by ``setattn.molprop.pretrain.load_pretrained``).

    Raises:
        FileNotFoundError: the shipped encoder is missing (a damaged installation).
        CheckpointError: its bytes are not the ones shipped.
    """
    if str(value) != DEFAULT:
        return Path(value)
    if not DEFAULT_ENCODER.is_file():
        raise FileNotFoundError(f"{DEFAULT_ENCODER}: the shipped encoder is missing; "
                                f"reinstall setattn")
    found = file_sha256(DEFAULT_ENCODER)
    if found != DEFAULT_SHA256:
        raise CheckpointError(f"{DEFAULT_ENCODER}: SHA-256 {found[:12]}..., not the shipped "
                              f"encoder's {DEFAULT_SHA256[:12]}...; reinstall setattn")
    return DEFAULT_ENCODER
