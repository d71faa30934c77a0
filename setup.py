"""One build step beyond pyproject.toml: the wheel ships the bundled data sets.

The repository keeps them in ``datasets/`` (the one copy, with its README of sources and
licences). Building a wheel copies the folders that ``setattn.datasets.bundled`` reads
into the package as ``setattn/_datasets/``, where the loaders look first. An editable
install copies nothing: it reads ``datasets/`` in place.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATASETS = Path(__file__).resolve().parent / "datasets"
# the folders the loaders read
BUNDLED = ("molecules", "images", "planetoid", "rt-polarity", "text")


class BuildWithDatasets(build_py):
    """``build_py`` that also copies ``datasets/{BUNDLED}`` and its README into the package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "setattn" / "_datasets"
        for name in BUNDLED:
            shutil.copytree(DATASETS / name, target / name, dirs_exist_ok=True)
        shutil.copy2(DATASETS / "README.md", target / "README.md")


setup(cmdclass={"build_py": BuildWithDatasets})
