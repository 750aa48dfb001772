"""A real two-node Ray cluster on this machine: a head and one more node, each its own raylet
with one CPU, loopback only. The driver connects by address (`--ray ADDRESS`), tasks land on
both nodes, a folder of the driver's machine travels to a task on the other node and back,
and losing the other node mid-run costs only its seeds.

Run alone with `pytest -m ray_cluster`. Each node has one CPU and every task takes one, so
two tasks at once are on two nodes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'arl[ray]')")

from arl.cli.main import main  # noqa: E402
from arl.errors import ArlError  # noqa: E402
from arl.parallel import Folder, Placements, Where, run_many  # noqa: E402

pytestmark = pytest.mark.ray_cluster


@dataclass
class TwoNodes:
    """The cluster: its address, its two node ids, and the other node (to stop it)."""

    cluster: object
    address: str
    head: str
    extra: str
    extra_node: object


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """Start a head and one more node (one CPU each, 127.0.0.1, Ray's files in a fresh
    temporary folder); stop both at the end, whatever happened. Never `ray stop`: it would
    stop every Ray on this machine."""
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    root = tempfile.mkdtemp(prefix="arl-ray-", dir="/tmp")  # short: socket paths <= 107 bytes
    mp = pytest.MonkeyPatch()
    # both nodes keep their files in RAY_TMPDIR/ray, and the cluster's address goes to
    # RAY_TMPDIR/ray/ray_current_cluster: in /tmp/ray, another process's plain ray.init()
    # would join this cluster instead of starting its own
    mp.setenv("RAY_TMPDIR", root)
    # loopback only: Ray turns a 127.0.0.1 address into this machine's network address
    # (where nothing listens) unless it runs as on a laptop; its subprocesses read the variable
    mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    mp.setenv("ARL_CACHE", str(tmp_path_factory.mktemp("cache")))  # both nodes inherit it
    mp.setenv("ARL_THREADS", "1")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack tests/
    cluster = None
    try:
        loopback = dict(num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=80 << 20)
        cluster = Cluster(
            initialize_head=True,
            head_node_args=dict(
                **loopback,
                include_dashboard=False,
                # a lost node is declared dead after ~2 s, not Ray's default ~30 s
                _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 4},
            ),
        )
        extra = cluster.add_node(**loopback)
        cluster.wait_for_nodes()
        yield TwoNodes(cluster, cluster.address, cluster.head_node.node_id, extra.node_id, extra)
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        mp.undo()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def driver(two_nodes):
    """Each test's driver connects by address itself (as `--ray ADDRESS` does), and leaves."""
    yield two_nodes
    ray.shutdown()


def _nodes(path: Path) -> dict[str, str]:
    """nodes.json as {task: node id}."""
    return {k: v["node"] for k, v in json.loads(path.read_text()).items()}


# --- the mechanism: tasks on both nodes, a folder there and back ---------------------------


def write_in(folder: str, k: int) -> dict:
    """A task that reads its folder, writes a file, deletes another: what a run does."""
    import ray as r

    here = Path(folder)
    seen = sorted(p.name for p in here.iterdir()) if here.is_dir() else []
    (here / "sub").mkdir(parents=True, exist_ok=True)
    (here / "sub" / f"task-{k}.txt").write_text(f"written by task {k}")
    (here / "old" / f"gone-{k}.txt").unlink()  # a file deleted, its folder kept
    shutil.rmtree(here / "ckpt")  # a folder deleted
    time.sleep(2)  # the two tasks overlap: one per node
    return {"k": k, "seen": seen, "node": r.get_runtime_context().get_node_id()}


def test_tasks_run_on_both_nodes_and_a_folder_goes_there_and_back(driver, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative folders name files of the driver's directory
    for k in (0, 1):
        (tmp_path / f"f{k}" / "old").mkdir(parents=True)
        (tmp_path / f"f{k}" / "old" / f"gone-{k}.txt").write_text("old")
        (tmp_path / f"f{k}" / "input.txt").write_text("in")
        (tmp_path / f"f{k}" / "ckpt" / "a").mkdir(parents=True)
        (tmp_path / f"f{k}" / "ckpt" / "a" / "w.bin").write_bytes(b"w")
    nodes = Placements(tmp_path / "nodes.json", key=lambda a: a[1])
    args = [(Folder(f"f{k}"), k) for k in (0, 1)]
    got = {a[1]: r for a, r in run_many(write_in, args, Where(ray=driver.address), nodes)}
    ran_on = {got[k]["node"] for k in (0, 1)}
    assert ran_on == {driver.head, driver.extra}  # one task on each node
    assert _nodes(tmp_path / "nodes.json") == {str(k): got[k]["node"] for k in (0, 1)}
    for k in (0, 1):
        f = tmp_path / f"f{k}"
        assert got[k]["seen"] == ["ckpt", "input.txt", "old"]  # the folder reached the task
        assert (f / "sub" / f"task-{k}.txt").read_text() == f"written by task {k}"
        assert (f / "old").is_dir() and not (f / "old" / f"gone-{k}.txt").exists()
        assert not (f / "ckpt").exists()  # deleted there, so deleted here
        assert (f / "input.txt").read_text() == "in"
        assert sorted(p.name for p in f.iterdir()) == ["input.txt", "old", "sub"]
    assert nodes.line(0).startswith(" on node ") and "(127.0.0.1)" in nodes.line(0)


def test_a_node_running_another_arl_refuses_its_task_in_one_line(driver, monkeypatch):
    import arl.parallel

    monkeypatch.setattr(arl.parallel, "versions", lambda: ("0.0.0", "9.9"))  # the driver's
    with pytest.raises(ArlError, match=r"runs arl .* with torch .*, the driver arl 0.0.0"):
        list(run_many(write_in, [(Folder("nowhere"), 0)], Where(ray=driver.address, retries=0)))


def node_of(actor) -> str:
    """The node a Ray actor lives on (run inside it by __ray_call__)."""
    import ray as r

    return r.get_runtime_context().get_node_id()


def test_pg_rollout_workers_sample_on_both_nodes_as_the_learner_would(
    driver, tiny_model, monkeypatch
):
    import copy

    from arl.bugfix.tasks import tasks_for
    from arl.rollout_workers import RolloutWorkers
    from arl.train.pg import TIMING_KEYS, train_pg
    from arl.train.pg_config import PGConfig

    nodes, used = [], []
    real_init, real_submit = RolloutWorkers.__init__, RolloutWorkers.submit

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        nodes.extend(ray.get([w.__ray_call__.remote(node_of) for w in self.workers]))

    def submit(self, *a):
        real_submit(self, *a)
        used.append(list(self.running.values())[-1])  # which worker took the job

    monkeypatch.setattr(RolloutWorkers, "__init__", init)
    monkeypatch.setattr(RolloutWorkers, "submit", submit)
    small = dict(steps=2, tasks_per_step=2, group_size=2, entropy_coef=0.01, eval_every=0, out="")

    def run(**kw):
        hist = train_pg(copy.deepcopy(tiny_model), PGConfig(**small, **kw), tasks_for("train")[:6])
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in hist]

    here = run()
    there = run(rollout_workers=2, ray_address=driver.address)
    assert there == here and here[-1]["grad_norm"] > 0  # the same episodes, the same updates
    assert sorted(nodes) == sorted([driver.head, driver.extra])  # one worker on each node
    assert sorted(nodes[w] for w in used) == sorted([driver.head, driver.extra])  # both sampled


def test_ray_local_starts_its_own_ray_even_beside_a_cluster(driver, monkeypatch):
    """In a process of its own, as a user's `arl ... --ray` is. A local Ray started and shut
    down inside this test process made a later test fail in 7 of 7 runs of this module on an
    idle machine (OwnerDiedError on that test's driver's own task arguments, in the 4 runs
    read); from a subprocess, in 0 of 7."""
    # as after `ray start` or with RAY_ADDRESS set: a plain ray.init() would join the cluster
    monkeypatch.setenv("RAY_ADDRESS", driver.address)
    code = (
        "from arl.parallel import init_ray; print(init_ray('local', 1).cluster_resources()['CPU'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "1.0"  # its own one-CPU Ray, not the 2-CPU cluster


# --- the commands: the same results as one process, seeds on both nodes ------------------


def _strip_runs(payload: dict) -> list[dict]:
    return [{k: v for k, v in R.items() if k != "timings_s"} for R in payload["runs"]]


@pytest.mark.slow
def test_reproduce_ch15_on_two_nodes_equals_one_process(driver, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    quick = ["reproduce", "ch15", "--quick", "--seeds", "2"]
    assert main([*quick, "--workers", "1", "--out", str(one)]) == 0
    assert main([*quick, "--ray", driver.address, "--out", str(two)]) == 0
    a, b = (json.loads((d / "results.json").read_text()) for d in (one, two))
    assert _strip_runs(b) == _strip_runs(a) and b["table"] == a["table"]
    assert set(_nodes(two / "nodes.json").values()) == {driver.head, driver.extra}
    assert not (one / "nodes.json").exists()  # local processes: no placement to record
    dirs = (one / "checkpoints", two / "checkpoints")
    # seed 0's checkpoints came back, whichever node wrote them: the same files, byte for byte
    ckpts = [{p.relative_to(d): p.read_bytes() for p in d.rglob("*.*")} for d in dirs]
    assert ckpts[1] == ckpts[0] and len(ckpts[0]) == 6  # config.json, weights: 3 models


PROBLEM_1 = ["reproduce", "problem", "1", "--quick", "--seed", "0"]  # --seed 3 overrides it


@pytest.fixture(scope="module")
def problem_1_here(two_nodes, tmp_path_factory) -> Path:
    """Problem 1, quick, seeds 0..2 in this one process: the reference."""
    out = tmp_path_factory.mktemp("p1") / "here"
    assert main([*PROBLEM_1, "--seeds", "3", "--workers", "1", "--out", str(out)]) == 0
    return out


def _records(results: dict) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in results["per_seed"]]


@pytest.mark.slow
def test_reproduce_problem_1_on_two_nodes_equals_one_process(driver, problem_1_here, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    shutil.copytree(problem_1_here, one)  # its seeds 0 and 1 are read back: nothing reruns
    quick = [*PROBLEM_1, "--seeds", "2"]
    assert main([*quick, "--workers", "1", "--out", str(one)]) == 0
    assert main([*quick, "--ray", driver.address, "--out", str(two)]) == 0
    a, b = (json.loads((d / "results.json").read_text()) for d in (one, two))
    assert a["seeds"] == b["seeds"] == [0, 1] and _records(b) == _records(a)
    assert {k: b[k] for k in ("claims", "shown", "counts")} == {
        k: a[k] for k in ("claims", "shown", "counts")
    }
    assert set(_nodes(two / "nodes.json")) == {"0", "1"}
    assert set(_nodes(two / "nodes.json").values()) == {driver.head, driver.extra}


@pytest.mark.slow
def test_train_pg_sweep_on_two_nodes_equals_one_process(driver, tmp_path, monkeypatch):
    from arl.train.bases import BaseConfig, new_model
    from arl.train.checkpoint.files import save_checkpoint

    monkeypatch.chdir(tmp_path)
    save_checkpoint(new_model(BaseConfig(seed=3)), "init")  # a starting checkpoint folder
    small = ["steps=2", "tasks_per_step=2", "group_size=2", "eval_every=0", "save_every=1"]
    sets = [x for s in small for x in ("--set", s)]
    base = ["train", "pg", "--init", "init", "--sweep", "seed=0,1", "--quiet", *sets]
    assert main([*base, "--workers", "1", "--set", "out=one"]) == 0
    assert main([*base, "--ray", driver.address, "--set", "out=two"]) == 0
    a, b = (json.loads(Path(d, "sweep.json").read_text()) for d in ("one", "two"))
    for v in ("0", "1"):
        (pa, pb) = (a["points"][v], b["points"][v])
        assert pb["last"] == pa["last"] and pb["out"] == f"two/seed={v}"
        lines = [_metrics(Path(d, f"seed={v}")) for d in ("one", "two")]
        assert lines[1] == lines[0] and len(lines[0]) == 2
        for step in ("ckpt-000001", "ckpt-000002"):  # every checkpoint, written wherever it ran
            w = [
                Path(d, f"seed={v}", step, "model.safetensors").read_bytes() for d in ("one", "two")
            ]
            assert w[1] == w[0]
    assert set(_nodes(Path("two/nodes.json")).values()) == {driver.head, driver.extra}


def _metrics(folder: Path) -> list[dict]:
    """A run's step records without the wall-clock keys."""
    from arl.train.pg import TIMING_KEYS

    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows if "reward" in r]


# --- a node lost mid-run (last: it stops the cluster's second node) ------------------------


def _running_on(node) -> bool:
    """Whether a worker of `node` (a child of its raylet) is executing an arl task now."""
    raylet = node.all_processes["raylet"][0].process.pid
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            title = (stat.parent / "cmdline").read_bytes().split(b"\0")[0]
        except (OSError, ValueError, IndexError):
            continue  # a process that ended meanwhile
        if ppid == raylet and title.startswith(b"ray::_on_node"):
            return True
    return False


def _finished(out: Path) -> dict[int, dict]:
    """The seeds results.partial.json holds now (seed -> record)."""
    try:
        saved = json.loads((out / "results.partial.json").read_text())
    except (OSError, ValueError):
        return {}
    return {r["seed"]: r for r in saved["per_seed"]}


@pytest.mark.slow
def test_losing_a_node_mid_run_reruns_its_seed_on_the_head_and_keeps_the_rest(two_nodes, tmp_path):
    out = tmp_path / "run"
    # seeds 3..6: their bases are not cached yet, so each seed trains its own on its node
    # (4-10 s). Four seeds on two one-CPU nodes: once one seed has finished, the other node
    # still has a whole seed to run (with three, two seeds ran side by side and ended within
    # moments of each other, and on an idle machine the run could end before it was caught)
    seeds = ["--seed", "3", "--seeds", "4"]
    cmd = [sys.executable, "-m", "arl", *PROBLEM_1, *seeds, "--ray", two_nodes.address]
    run = subprocess.Popen([*cmd, "--out", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.monotonic()
        while not (_finished(out) and _running_on(two_nodes.extra_node)):
            assert run.poll() is None and time.monotonic() - t0 < 300, run.communicate()[1]
            time.sleep(0.2)
        before = _finished(out)
        two_nodes.cluster.remove_node(two_nodes.extra_node, allow_graceful=False)
        time.sleep(1.0)
        kept = set(_finished(out))  # everything the other node finished had come back
        _, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err[-3000:]
    # the same seeds in this one process (reading the bases the nodes cached)
    assert main([*PROBLEM_1, *seeds, "--workers", "1", "--out", str(tmp_path / "here")]) == 0
    results, here = (json.loads((d / "results.json").read_text()) for d in (out, tmp_path / "here"))
    assert _records(results) == _records(here)  # the same numbers as one process
    assert results["claims"] == here["claims"] and results["shown"] == here["shown"]
    by_seed = {r["seed"]: r for r in results["per_seed"]}
    assert all(by_seed[s] == r for s, r in before.items())  # as it was, seconds too: not rerun
    nodes = _nodes(out / "nodes.json")
    lost = {3, 4, 5, 6} - kept
    assert lost and all(nodes[str(s)] == two_nodes.head for s in lost)  # rerun on the head
    assert not (out / "results.partial.json").exists()
