"""Rollout workers: the learner sends versioned weights, the workers send trajectories back.

    sampler = RolloutWorkers(model, n=2, where="local")   # Ray actors, one core each
    sampler.submit(version, weights, job)                # a job: (tasks, seed), sampled remotely
    version_used, result = sampler.next()                # the first job that finished

Each worker holds its own copy of the policy and replaces its weights only when a job
brings newer ones (weights travel once per version through Ray's object store). The
learner decides what to do with a result sampled `version - version_used` steps ago:
the policy-gradient trainer's staleness bound and truncated importance correction apply to
it exactly as to its in-process simulation of stale sampling. `InProcessWorkers` is the
same interface on the learner's own process (one worker, no Ray): the reference the Ray
run must equal in synchronous mode.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch

from arl.parallel import init_ray

SampleFn = Callable[[Any, Any, int], Any]  # (policy, tasks, seed) -> result (e.g. groups)


class _Worker:
    """One rollout process: a policy copy, the version of its weights, a sample function."""

    def __init__(self, policy: bytes | torch.nn.Module, sample_fn: SampleFn, threads: int = 1):
        import io

        torch.set_num_threads(threads)
        if isinstance(policy, bytes):  # on Ray: the pickled policy, built once per actor
            policy = torch.load(io.BytesIO(policy), weights_only=False)
        else:  # in this process: a copy the learner's updates do not touch
            policy = copy.deepcopy(policy)
        self.policy = policy.eval()
        self.sample_fn = sample_fn
        self.version = -1

    def ready(self) -> bool:
        return True

    def run(self, version: int, weights: dict | None, tasks: Sequence, seed: int):
        if weights is not None and version != self.version:
            self.policy.load_state_dict(weights)
            self.version = version
        return self.version, self.sample_fn(self.policy, tasks, seed)


def policy_bytes(model: torch.nn.Module) -> bytes:
    """The policy, pickled once, to build each worker's copy (weights follow by version)."""
    import io

    buf = io.BytesIO()
    torch.save(copy.deepcopy(model).cpu(), buf)
    return buf.getvalue()


class InProcessWorkers:
    """One worker in the learner's process: sampling then training, strictly in turn."""

    def __init__(self, model: torch.nn.Module, sample_fn: SampleFn):
        threads = torch.get_num_threads()
        self.worker = _Worker(model, sample_fn, threads)  # the learner's own thread count
        self.done: deque = deque()
        self.n = 1

    def submit(self, version: int, weights: dict, tasks: Sequence, seed: int) -> None:
        self.done.append(self.worker.run(version, weights, tasks, seed))

    def next(self) -> tuple[int, Any]:
        return self.done.popleft()

    def close(self) -> None:
        pass


class RolloutWorkers:
    """`n` Ray actors; jobs go to the idle one, results come back in the order they finish.

    A worker that dies is restarted by Ray (max_restarts) and its job resubmitted
    (max_task_retries): the job's seed fixes its trajectories, so a rerun samples the same
    episodes from the same weights version.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        sample_fn: SampleFn,
        n: int = 2,
        where: str | None = "local",
        threads: int = 1,
        restarts: int = 2,
    ):
        ray = init_ray(where, num_cpus=max(n, 1))
        self.ray = ray
        actor = ray.remote(num_cpus=1, max_restarts=restarts, max_task_retries=restarts)(_Worker)
        self.blob = ray.put(policy_bytes(model))  # held: a restarted actor is built from it
        self.workers = [actor.remote(self.blob, sample_fn, threads) for _ in range(n)]
        ray.get([w.ready.remote() for w in self.workers])  # all started: a bad setup fails here
        self.idle = list(range(n))
        self.running: dict = {}  # ObjectRef -> worker index
        self._weights: tuple[int, Any] | None = None
        self.n = n

    def submit(self, version: int, weights: dict, tasks: Sequence, seed: int) -> None:
        if not self.idle:
            raise RuntimeError("every worker is busy: call next() first")
        if self._weights is None or self._weights[0] != version:
            self._weights = (version, self.ray.put({k: v.cpu() for k, v in weights.items()}))
        w = self.idle.pop(0)
        ref = self.workers[w].run.remote(version, self._weights[1], tasks, seed)
        self.running[ref] = w

    def next(self) -> tuple[int, Any]:
        ready, _ = self.ray.wait(list(self.running), num_returns=1)
        w = self.running.pop(ready[0])
        self.idle.append(w)
        return self.ray.get(ready[0])

    def kill(self, i: int) -> None:
        """Kill worker i's process (for tests and drills): Ray restarts it, its job reruns."""
        self.ray.kill(self.workers[i], no_restart=False)

    def close(self) -> None:
        for w in self.workers:
            self.ray.kill(w)
