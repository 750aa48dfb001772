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


# --- running in parallel (pytest-xdist; scripts/test passes `-n auto --dist loadgroup`) -------
# Under `--dist loadgroup` the tests of one group run on one worker, one after another, while
# the other workers take the rest:
# - "ray": the modules built around a Ray instance or cluster (one at a time on the machine);
# - "cpu": modules whose tests start worker pools or sandboxes of their own;
# - "timing": tests that measure wall time (a deadline, a rate, a browser's load);
# - a module that trains its bases into a private cache (`private_cache`) is a group of its
#   own, so its bases are trained once, on one worker, not once on each.
XDIST_GROUPS = {
    "ray": ("test_ray_cluster", "test_pg_ray", "test_parallel"),
    "cpu": (
        "test_sandbox",
        "test_sandbox_grading",
        "test_parallel_schedule",
        "test_cli_reliability",
    ),
    "timing": ("test_progress", "test_report_browser"),
}
_GROUP_OF = {module: group for group, modules in XDIST_GROUPS.items() for module in modules}

# Each worker's Ray keeps its files (and its "current cluster" address) in a folder of its
# own, so a plain ray.init() on one worker never joins another worker's instance. Short, under
# /tmp: Ray's socket paths must stay under 108 bytes.
if os.environ.get("PYTEST_XDIST_WORKER") and "RAY_TMPDIR" not in os.environ:
    import tempfile

    os.environ["RAY_TMPDIR"] = _RAY_TMPDIR = tempfile.mkdtemp(prefix="arl-ray-", dir="/tmp")

    def pytest_sessionfinish(session, exitstatus):
        import shutil

        shutil.rmtree(_RAY_TMPDIR, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = getattr(item, "module", None)
        if module is None or item.get_closest_marker("xdist_group") is not None:
            continue
        name = module.__name__.rsplit(".", 1)[-1]
        if name in _GROUP_OF:
            item.add_marker(pytest.mark.xdist_group(_GROUP_OF[name]))
        elif "private_cache" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(name))


@pytest.fixture(autouse=True)
def _fixed_seeds():
    """Every test starts from the same global seeds, whichever worker runs it, after what."""
    import random

    import numpy as np

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
