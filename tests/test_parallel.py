"""run_many: the same results in this process, in local processes and on Ray; failed and
killed tasks are rerun."""

import os
import sys
import time
from pathlib import Path

import pytest
import torch

from arl.errors import ArlError
from arl.parallel import Where, run_many


def seeded_draw(seed: int, n: int) -> list[float]:
    """A deterministic piece of work: a seeded torch draw (threads set per task)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g).tolist() + [float(torch.get_num_threads())]


def fails_once(marker: str, value: int) -> int:
    """Raise the first time (when `marker` does not exist yet), then succeed."""
    p = Path(marker)
    if not p.exists():
        p.write_text("x")
        raise RuntimeError("transient")
    return value * 10


def dies_once(marker: str, value: int) -> int:
    """Kill the worker process the first time, as an OOM kill or a lost node would."""
    p = Path(marker)
    if not p.exists():
        p.write_text("x")
        os._exit(1)
    return value * 10


def bad_input(value: int) -> int:
    raise ArlError(f"bad value {value}")


ARGS = [(s, 3) for s in range(4)]


def _all(where: Where, fn=seeded_draw, args=ARGS) -> dict:
    return dict(run_many(fn, args, where))


def test_processes_give_the_same_results_as_one_process():
    one = _all(Where(workers=1))
    two = _all(Where(workers=2))
    assert one == two
    assert len({tuple(v) for v in one.values()}) == 4  # each seed its own draw
    assert all(v[-1] == 1.0 for v in two.values())  # one torch thread per task


def test_a_failed_task_is_retried_and_bad_input_is_not(tmp_path):
    args = [(str(tmp_path / "m"), 2)]
    assert _all(Where(workers=1, retries=1), fails_once, args) == {args[0]: 20}
    with pytest.raises(RuntimeError, match="transient"):
        _all(Where(workers=1, retries=0), fails_once, [(str(tmp_path / "m2"), 2)])
    with pytest.raises(ArlError, match="bad value [78]"):  # whichever fails first
        _all(Where(workers=2), bad_input, [(7,), (8,)])


def test_a_killed_worker_process_is_replaced_and_its_task_rerun(tmp_path):
    # each task kills its worker once; a broken pool charges every unfinished task a rerun
    args = [(str(tmp_path / f"m{i}"), i) for i in range(2)]
    got = _all(Where(workers=2, retries=2), dies_once, args)
    assert got == {a: a[1] * 10 for a in args}
    with pytest.raises(ArlError, match="died"):
        _all(
            Where(workers=2, retries=0),
            dies_once,
            [(str(tmp_path / "n"), 1), (str(tmp_path / "o"), 2)],
        )


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'arl[ray]')")
    # Ray workers lack tests/ on sys.path: ship this module by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_same_results_and_reruns_a_killed_task(ray_local, tmp_path):
    assert _all(Where(ray="local", workers=2)) == _all(Where(workers=1))
    args = [(str(tmp_path / "k"), 5)]
    assert _all(Where(ray="local", retries=2), dies_once, args) == {args[0]: 50}
    assert _all(Where(ray="local", retries=2), fails_once, [(str(tmp_path / "f"), 1)]) == {
        (str(tmp_path / "f"), 1): 10
    }
    with pytest.raises(ArlError, match="bad value 3"):
        _all(Where(ray="local", retries=0), bad_input, [(3,)])


def sample_ids(policy, tasks, seed):
    """A rollout job: the sampled ids of one episode per task."""
    from arl.rollout import rollout_batch

    return [t.ids_T for t in rollout_batch(policy, tasks, seed=seed)]


def slow_sample_ids(policy, tasks, seed):
    """A rollout job long enough to be killed in the middle."""
    import time

    time.sleep(3)
    return sample_ids(policy, tasks, seed)


def test_rollout_workers_sample_what_the_learner_would_and_survive_a_kill(ray_local):
    from arl.bugfix.tasks import tasks_for
    from arl.model import TinyAgent, TinyAgentConfig
    from arl.rollout_workers import InProcessWorkers, RolloutWorkers

    torch.manual_seed(0)
    model = TinyAgent(TinyAgentConfig(vocab_size=98, n_layer=1, n_embd=32, n_head=2))
    tasks = tasks_for("train")[:3]
    local = InProcessWorkers(model, sample_ids)
    remote = RolloutWorkers(model, sample_ids, n=2)
    try:
        w0 = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        w1 = {k: v.clone() for k, v in model.state_dict().items()}
        for version, w in ((0, w0), (1, w1)):
            local.submit(version, w, tasks, 5)
            remote.submit(version, w, tasks, 5)
        got = sorted(remote.next() for _ in range(2))
        want = sorted(local.next() for _ in range(2))
        assert got == want and got[0][1] != got[1][1]  # each version's own episodes
    finally:
        remote.close()
    slow = RolloutWorkers(model, slow_sample_ids, n=1)
    try:
        slow.submit(1, w1, tasks, 9)
        time.sleep(1.0)
        slow.kill(0)  # mid-job: Ray restarts the actor and reruns the job
        local.submit(1, w1, tasks, 9)
        assert slow.next() == local.next()
    finally:
        slow.close()
