"""Named shortcuts for the bundled data sets: the repository's ``datasets/`` folder.

``load_freesolv``, ``load_esol``, ``load_tox21``, ``load_solubility``, ``load_cora``,
``load_mr``, ``load_trec``, ``load_cr``, ``load_digits``, ``load_mnist5k``; each takes
``root`` to look in another folder laid out the same way (see ``datasets/README.md``).
By default they read ``DATASETS_DIR``: in an installed wheel the copy shipped inside the
package (``setattn/_datasets``, put there by the build, see ``setup.py``), in a source
checkout or an editable install the repository's ``datasets/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch_geometric.data import Data

from setattn.datasets.files import PathLike, existing_file
from setattn.datasets.images import ImageSet, load_image_csv
from setattn.datasets.planetoid import load_planetoid
from setattn.datasets.text import TextSet, load_labelled_lines

if TYPE_CHECKING:  # the molecule loaders import RDKit (setattn[molecules]) when called
    from setattn.datasets.molecules import MoleculeSet

__all__ = [
    "DATASETS_DIR",
    "TOX21_TASKS",
    "TREC_CLASSES",
    "load_cora",
    "load_cr",
    "load_digits",
    "load_esol",
    "load_freesolv",
    "load_mnist5k",
    "load_mr",
    "load_solubility",
    "load_tox21",
    "load_trec",
]


def _bundled_dir() -> Path:
    """``setattn/_datasets`` when the package ships it (a wheel), else the repository's
    ``datasets/`` beside the package. The shipped copy comes first: a ``datasets`` folder
    beside an installed package would be another distribution's (in site-packages)."""
    package = Path(__file__).resolve().parents[1]
    shipped = package / "_datasets"
    return shipped if shipped.is_dir() else package.parent / "datasets"


DATASETS_DIR: Path = _bundled_dir()
"""Where the named shortcuts look by default: ``setattn/_datasets`` in an installed
wheel, the repository's ``datasets/`` in a source checkout or an editable install."""

TOX21_TASKS: tuple[str, ...] = (
    "NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD",
    "NR-PPAR-gamma", "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53",
)  # fmt: skip


def _root(root: PathLike | None) -> Path:
    """``root`` as a ``Path``, or ``DATASETS_DIR`` when it is None."""
    return DATASETS_DIR if root is None else Path(root)


def load_freesolv(
    *, graph: Literal["bonds", "complete"] = "bonds", root: PathLike | None = None
) -> MoleculeSet:
    """FreeSolv: 642 molecules, target ``expt`` (hydration free energy, kcal/mol)."""
    from setattn.datasets.molecules import load_molecule_csv

    path = _root(root) / "molecules" / "freesolv.csv"
    return load_molecule_csv(path, "smiles", ["expt"], graph=graph)


def load_esol(
    *, graph: Literal["bonds", "complete"] = "bonds", root: PathLike | None = None
) -> MoleculeSet:
    """ESOL (Delaney): 1128 molecules, target measured log solubility (mol/L)."""
    from setattn.datasets.molecules import load_molecule_csv

    path = _root(root) / "molecules" / "delaney-processed.csv"
    target = "measured log solubility in mols per litre"
    return load_molecule_csv(path, "smiles", [target], graph=graph)


def load_tox21(
    *, graph: Literal["bonds", "complete"] = "bonds", root: PathLike | None = None
) -> MoleculeSet:
    """Tox21: 7831 rows, 12 binary tasks (``TOX21_TASKS``) with missing labels as NaN.

    8 SMILES (aluminium species) do not parse in RDKit; they are in ``failures``,
    so ``data`` holds 7823 molecules.
    """
    from setattn.datasets.molecules import load_molecule_csv

    path = _root(root) / "molecules" / "tox21.csv"
    return load_molecule_csv(path, "smiles", list(TOX21_TASKS), graph=graph)


def load_solubility(
    split: Literal["train", "test"] = "train",
    *,
    graph: Literal["bonds", "complete"] = "bonds",
    root: PathLike | None = None,
) -> MoleculeSet:
    """Huuskonen aqueous solubility: 1025 train or 257 test molecules, target ``SOL``."""
    if split not in ("train", "test"):
        raise ValueError(f"argument split must be 'train' or 'test', got {split!r}")
    from setattn.datasets.molecules import load_molecule_sdf

    path = _root(root) / "molecules" / f"solubility.{split}.sdf"
    return load_molecule_sdf(path, ["SOL"], graph=graph)


def load_cora(*, root: PathLike | None = None) -> Data:
    """Cora: 2708 nodes, 1433 binary features, 7 classes, 10556 directed edges.

    Standard split 140 / 500 / 1000, read from the bundled pickle-free ``cora.npz``.
    """
    return load_planetoid(_root(root) / "planetoid", "cora")


def load_mr(*, root: PathLike | None = None) -> TextSet:
    """MR (rt-polarity): 10662 sentences, 5331 negative (label 0) then 5331 positive (1).

    Sentences are already lower-cased and tokenised (tokens separated by spaces).
    """
    folder = _root(root) / "rt-polarity"
    texts: list[str] = []
    labels: list[int] = []
    for label, part in enumerate(("neg", "pos")):
        path = existing_file(folder / f"rt-polarity.{part}", "root")
        lines = path.read_text(encoding="utf-8").splitlines()
        texts += [line.strip() for line in lines]
        labels += [label] * len(lines)
    return TextSet(texts, torch.tensor(labels, dtype=torch.long), ["negative", "positive"])


TREC_CLASSES = ["description", "entity", "abbreviation", "human", "location", "numeric"]
"""The six coarse TREC question types, in the order of the bundled files' labels 0-5."""


def load_trec(split: Literal["train", "test"] = "train", *, root: PathLike | None = None
              ) -> TextSet:
    """TREC question type (Li & Roth 2002): 5452 training or 500 test questions, six
    coarse classes (``TREC_CLASSES``); tokenised, case kept."""
    if split not in ("train", "test"):
        raise ValueError(f"argument split must be 'train' or 'test', got {split!r}")
    path = _root(root) / "text" / f"TREC.{split}.all"
    return load_labelled_lines(existing_file(path, "root"), TREC_CLASSES)


def load_cr(*, root: PathLike | None = None) -> TextSet:
    """CR customer reviews (Hu & Liu 2004): 3775 sentences, 1368 negative (label 0) and
    2407 positive (1); lower-cased and tokenised."""
    path = _root(root) / "text" / "custrev.all"
    return load_labelled_lines(existing_file(path, "root"), ["negative", "positive"])


def load_digits(*, root: PathLike | None = None) -> ImageSet:
    """UCI digits: 1797 images (1, 8, 8), pixels scaled from 0-16 to [0, 1], labels 0-9."""
    path = _root(root) / "images" / "digits.csv.gz"
    return load_image_csv(path, 8, 8, scale=16.0)


def load_mnist5k(*, root: PathLike | None = None) -> ImageSet:
    """MNIST subset: 5000 images (1, 28, 28), 500 per class, pixels scaled to [0, 1]."""
    path = _root(root) / "images" / "mnist_5k.csv.gz"
    return load_image_csv(path, 28, 28, scale=255.0)
