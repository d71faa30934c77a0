import pytest
import torch

# The suite runs as `pytest -n 2` on two cores: one intra-op thread per worker avoids
# oversubscription, and the tensors in tests are far too small to gain from more.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state, whatever ran before it."""
    torch.manual_seed(0)
    yield
