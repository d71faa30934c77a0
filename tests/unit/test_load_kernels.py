"""``load_kernels``: the compiled CPU kernels load before training, not in its first step."""

from __future__ import annotations

import json
import subprocess
import sys

# Run in a fresh process: in this one other tests may already have loaded the kernels.
SCRIPT = r"""
import json
import torch
from numba.core.registry import CPUDispatcher
from setattn.engine import cpu_kernels
from setattn.molprop.batching import PackedMolecules
from setattn.molprop.config import NetworkConfig
from setattn.molprop.featurize import featurize
from setattn.molprop.loop import load_kernels
from setattn.molprop.network import MoleculeNetwork

def loaded():
    return {name: len(f.overloads) for name, f in vars(cpu_kernels).items()
            if isinstance(f, CPUDispatcher)}

smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN(CC)CC", "OC(=O)c1ccccc1"]
data = [featurize(s, 103) for s in smiles]  # the "fast" descriptors
for i, d in enumerate(data):
    d.y = torch.tensor([[float(i)]])
config = NetworkConfig(num_tasks=1, descriptor_dim=103)
before, rng = loaded(), torch.get_rng_state()
seconds = load_kernels(config, data[:2], "cpu")
after_load, rng_after = loaded(), torch.get_rng_state()
torch.manual_seed(0)
model = MoleculeNetwork(config)
batch = PackedMolecules(data).training_batch([2, 3, 4])
model(batch).square().mean().backward()
with torch.no_grad():
    model.eval()(batch)
print(json.dumps({"before": before, "after_load": after_load, "after_step": loaded(),
                  "rng_kept": bool(torch.equal(rng, rng_after)), "seconds": seconds,
                  "no_molecules": load_kernels(config, [], "cpu")}))
"""


def test_load_kernels_loads_every_kernel_a_training_step_calls_and_keeps_the_rng():
    out = subprocess.run([sys.executable, "-c", SCRIPT], check=True, capture_output=True,
                         text=True).stdout
    found = json.loads(out.strip().splitlines()[-1])
    assert sum(found["before"].values()) == 0  # a fresh process: nothing loaded yet
    assert found["after_load"]["head_dots"] >= 1 and found["after_load"]["softmax_sum"] >= 1
    # the training step and an evaluation pass after it load nothing new
    assert found["after_step"] == found["after_load"]
    assert found["rng_kept"]
    assert found["seconds"] > 0.0
    assert found["no_molecules"] == 0.0  # no molecules: nothing to pass, nothing loaded
