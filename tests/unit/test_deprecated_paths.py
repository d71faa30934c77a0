"""Import paths of earlier versions keep working for now, and say where things moved."""

import importlib
import sys

import pytest


@pytest.mark.parametrize("old, new, names", [
    ("setattn.train", "setattn.molprop",
     ["run_training", "fit", "RunConfig", "TrainConfig", "load_run", "CheckpointError"]),
    ("setattn.moldata", "setattn.molprop",
     ["featurize_csv", "collate_molecules", "PackedMolecules"]),
])
def test_old_module_warns_and_reexports_the_new_objects(old, new, names):
    sys.modules.pop(old, None)  # a fresh import, so that the warning is raised again
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import from {new}"):
        module = importlib.import_module(old)
    current = importlib.import_module(new)
    for name in names:
        assert getattr(module, name) is getattr(current, name), name
