"""Policy gradient with Ray rollout workers: synchronous equals in-process, asynchronous
respects the staleness bound, and a killed worker costs a rerun, not the run."""

import pytest

from arl.bugfix.tasks import tasks_for
from arl.errors import ArlError
from arl.train.pg import TIMING_KEYS, train_pg
from arl.train.pg_config import PGConfig

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'arl[ray]')")

SMALL = dict(
    steps=3,
    tasks_per_step=2,
    group_size=2,
    minibatches=2,
    entropy_coef=0.01,
    staleness=1,
    eval_every=0,
    out="",
)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _run(model, **kw):
    hist = train_pg(model, PGConfig(**{**SMALL, **kw}), tasks=tasks_for("train")[:6])
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in hist]


def test_one_synchronous_worker_gives_the_in_process_run(tiny_model):
    import copy

    here = _run(copy.deepcopy(tiny_model))
    remote = _run(copy.deepcopy(tiny_model), rollout_workers=1)
    assert remote == here  # same episodes, same updates, same metrics (wall clock aside)
    assert here[-1]["grad_norm"] > 0  # the steps did update the model


def test_async_workers_stay_within_the_staleness_bound_and_a_kill_is_redone(
    tiny_model, monkeypatch
):
    from arl.rollout_workers import RolloutWorkers

    submits = []
    real_submit = RolloutWorkers.submit

    def submit_then_kill(self, *a):
        real_submit(self, *a)
        submits.append(a[0])
        if len(submits) == 3:  # a worker dies with a job in flight: Ray restarts it and reruns
            self.kill(0)

    monkeypatch.setattr(RolloutWorkers, "submit", submit_then_kill)
    hist = _run(tiny_model, rollout_workers=2, async_rollouts=True, steps=4)
    lags = [r["rollout/staleness"] for r in hist if "rollout/staleness" in r]
    assert len(lags) == 4 and max(lags) <= 1  # never older than the bound
    # truly ahead: both workers start from the first weights, so one job runs past step 1
    # (whether a step then takes it, lag 1, or drops it depends on the timing: not asserted)
    assert submits[:2] == [0, 0]
    assert all("capped_frac" in r for r in hist if "step" in r and "reward" in r)
    assert len(submits) >= 5  # two jobs in flight, one more after each step


def test_async_needs_workers_and_refuses_dynamic_sampling():
    with pytest.raises(ArlError, match="async_rollouts"):
        PGConfig(async_rollouts=True)
    with pytest.raises(ArlError, match="dynamic_sampling"):
        PGConfig(async_rollouts=True, rollout_workers=2, dynamic_sampling=True)
