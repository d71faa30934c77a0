import signal
import threading

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


@pytest.fixture(autouse=True, scope="session")
def _feature_cache(tmp_path_factory):
    """``setattn train`` caches featurised CSVs; tests keep that cache in a temporary folder."""
    import os

    old = os.environ.get("SETATTN_CACHE_DIR")
    os.environ["SETATTN_CACHE_DIR"] = str(tmp_path_factory.mktemp("feature_cache"))
    yield
    if old is None:
        os.environ.pop("SETATTN_CACHE_DIR", None)
    else:
        os.environ["SETATTN_CACHE_DIR"] = old


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_reaches_started_commands():
    """Tests send Ctrl-C (SIGINT) to the commands they start. A test run started in the
    background by a shell without job control (``nohup make test &`` in a script)
    inherits SIGINT ignored, and so would every command it starts: an ignored signal
    stays ignored across exec, and Python then installs no KeyboardInterrupt. Python's
    own handler here gives those commands the default, as from a terminal."""
    inherited = (threading.current_thread() is threading.main_thread()
                 and signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
    if inherited:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if inherited:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
