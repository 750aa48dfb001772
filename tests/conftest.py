import os

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(1)  # tiny models are overhead-bound; one thread never stalls


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a test module, restored after it (a CLI call may change it)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory, one_thread):
    """A private base cache for one test module (its quick bases train once) and one thread."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ARL_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def vocab():
    from arl.gym import default_vocab

    return default_vocab()


@pytest.fixture()
def tiny_model(vocab):
    """A small randomly initialized TinyAgent (fixed seed)."""
    from arl.model import TinyAgent, TinyAgentConfig

    torch.manual_seed(0)
    return TinyAgent(TinyAgentConfig(vocab_size=len(vocab), n_layer=2, n_embd=32, n_head=4))


@pytest.fixture()
def cli(capsys):
    """Run `arl` in-process; returns (exit code, stdout, stderr), usage errors included."""
    from arl.cli.main import main

    def run(*argv):
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err

    return run
