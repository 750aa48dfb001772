"""PG's data source: G episodes of each task per step, from the sampler's weights.

`Rollouts.draw` is a step's whole draw: its tasks (`choose_tasks`: tasks whose last group was
all-pass or all-fail sit out a cooldown), their groups sampled in this process or on Ray
rollout workers (sync, or async within the staleness bound), all-equal groups refilled with
other tasks under dynamic sampling, from the weights of k steps ago that simulated
async sampling uses (`sampler_of`). The loop that weights these episodes is arl.train.pg.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from arl.env import Task
from arl.losses import degenerate_groups
from arl.model import TinyAgent
from arl.rollout import rollout_batch
from arl.train.checkpoint import LoopState
from arl.train.pg_config import PGConfig
from arl.types import Trajectory


class NoisyLogits:
    """A sampler whose logits carry fresh Gaussian error of sd `sigma` nats at every position
    (Problem 20's noisy engine, as numerics that differ from the trainer's); the rollout's
    recorded log mu are those of the noisy logits each token was sampled from."""

    def __init__(self, model: TinyAgent, sigma: float, seed: int):
        self.model, self.sigma = model, sigma
        self.gen = torch.Generator().manual_seed(seed)

    def __getattr__(self, name: str):
        return getattr(self.model, name)  # config, new_cache, eval, training, ...

    def noisy(self, logits: torch.Tensor) -> torch.Tensor:
        """logits (..., V) plus sigma x standard normal noise of the same shape."""
        z = torch.randn(logits.shape, generator=self.gen, dtype=torch.float32)
        return logits + self.sigma * z.to(logits)

    def extend(self, ids: torch.Tensor, n_new: torch.Tensor, cache) -> torch.Tensor:
        return self.noisy(self.model.extend(ids, n_new, cache))  # (B, V)

    def __call__(self, ids: torch.Tensor):
        full, *rest = self.model(ids)  # (B, L, V), ...
        return (self.noisy(full), *rest)


def sample_groups(
    sampler: TinyAgent, tasks: Sequence[Task], config: PGConfig, seed: int
) -> list[list[Trajectory]]:
    """G episodes of each task in one batched rollout; returns one group per task (with
    config.sampler_noise, sampled from logits that carry that noise)."""
    G = config.group_size
    jobs = [t for t in tasks for _ in range(G)]
    if config.sampler_noise:
        sampler = NoisyLogits(sampler, config.sampler_noise, seed + 1)
    trajs = rollout_batch(
        sampler,
        jobs,
        seed=seed,
        env_config=config.env,
        temperature=config.temperature,
        top_p=config.top_p,
    )
    return [trajs[i * G : (i + 1) * G] for i in range(len(tasks))]


def remote_groups(policy, tasks: Sequence[Task], seed: int, config: PGConfig):
    """A rollout worker's job: sample_groups on the worker's copy of the policy."""
    return sample_groups(policy, tasks, config, seed)


def group_rewards(groups: Sequence[Sequence[Trajectory]]) -> torch.Tensor:
    return torch.tensor([[t.reward for t in g] for g in groups], dtype=torch.float)  # (N, G)


def choose_tasks(pool: Sequence[Task], s: LoopState, n: int, step: int) -> list[Task]:
    """n distinct tasks, minus those whose last group was degenerate (pass-rate filtering)."""
    eligible = [t for t in pool if s.cooldown.get(t.name, 0) <= step]
    resting = [t for t in pool if s.cooldown.get(t.name, 0) > step]
    if len(eligible) >= n:
        return s.rng.sample(eligible, n)
    extra = s.rng.sample(resting, min(n - len(eligible), len(resting)))
    return eligible + extra + s.rng.choices(pool, k=n - len(eligible) - len(extra))


def sampler_of(model: TinyAgent, behavior: TinyAgent | None, s: LoopState, k: int) -> TinyAgent:
    """The weights of k steps ago, each step `minibatches` x `epochs` optimizer updates
    (simulated async sampling, Problem 16)."""
    if not k:
        return model
    s.queue.append({n: v.detach().clone() for n, v in model.state_dict().items()})
    while len(s.queue) > k + 1:
        s.queue.popleft()
    behavior.load_state_dict(s.queue[0])
    return behavior


def in_sampler_dtype(sampler: TinyAgent, low: TinyAgent | None) -> TinyAgent:
    """The sampler's weights in the inference engine's dtype (Problem 20): copied, rounded,
    into `low` (a copy kept in that dtype, whose logits are then computed in it); None: as is."""
    if low is None:
        return sampler
    low.load_state_dict(sampler.state_dict())  # copy_ casts each tensor to low's dtype
    return low


@dataclass(frozen=True)
class Drawn:
    """A step's groups, and what drawing them cost and found."""

    chosen: list[Task]  # the task of each group, after the refills
    groups: list[list[Trajectory]]  # (N, G) episodes
    sampled: int  # episodes sampled: the refills' too
    degenerate_frac: float  # share of all-equal groups as first drawn
    degenerate_frac_final: float  # and after the refills
    extra: dict[str, int]  # async: the staleness of the job taken, the jobs dropped so far

    @property
    def episodes(self) -> list[Trajectory]:
        """Every group's episodes, group after group: (N x G,)."""
        return [t for g in self.groups for t in g]


class Rollouts:
    """Where a step's groups come from: this process, or `rollout_workers` Ray actors.

    Synchronous (the default): the sampler's weights (k steps old under `staleness` k) go
    to a worker and the step waits, so the episodes are the in-process ones. Asynchronous:
    every worker always holds a job planned from the newest weights; a step takes the first
    one that finishes, `lag` updates old, and drops it (and samples again) past `staleness`.
    """

    def __init__(self, model: TinyAgent, config: PGConfig, pool: Sequence[Task]):
        self.config, self.pool, self.workers, self.dropped = config, list(pool), None, 0
        stale = config.staleness and not config.async_rollouts  # simulated: k steps old weights
        self.behavior = copy.deepcopy(model).eval() if stale else None  # the sampler's copy
        low = config.sampler_dtype != "float32"  # the inference engine's dtype (Problem 20)
        dtype = getattr(torch, config.sampler_dtype)
        self.low = copy.deepcopy(model).to(dtype).eval() if low else None  # refreshed each step
        if config.rollout_workers:
            from functools import partial

            from arl.rollout_workers import RolloutWorkers

            job = partial(remote_groups, config=config)
            self.workers = RolloutWorkers(model, job, config.rollout_workers, config.ray_address)

    def draw(self, model: TinyAgent, s: LoopState, step: int) -> Drawn:
        """Step `step`'s groups; the tasks of all-equal ones then sit out their cooldown."""
        config = self.config
        if config.async_rollouts:
            chosen, groups, lag = self._ahead(model, s, step)
            extra = {"rollout/staleness": lag, "rollout/dropped": self.dropped}
            sampled = len(chosen) * config.group_size
            degenerate0 = degenerate_groups(group_rewards(groups))  # (N,)
        else:
            sampler = sampler_of(model, self.behavior, s, config.staleness)
            sampler = in_sampler_dtype(sampler, self.low)
            version = max(step - 1 - config.staleness, 0)  # updates in the sampler's weights
            chosen = choose_tasks(self.pool, s, config.tasks_per_step, step)
            groups = self._sample(sampler, version, chosen, s.rng.randrange(2**31))
            degenerate0 = degenerate_groups(group_rewards(groups))  # (N,)
            extra, sampled = {}, len(chosen) * config.group_size
            sampled += self._refill(sampler, version, chosen, groups, s)
        degenerate = degenerate_groups(group_rewards(groups))  # (N,) after the refills
        for t, d in zip(chosen, degenerate.tolist(), strict=True):
            if d and config.filter_cooldown:
                s.cooldown[t.name] = step + 1 + config.filter_cooldown
        first, final = float(degenerate0.float().mean()), float(degenerate.float().mean())
        return Drawn(chosen, groups, sampled, first, final, extra)

    def _sample(self, sampler, version: int, tasks: Sequence[Task], seed: int) -> list:
        """The groups of `tasks`, sampled now by `sampler` (weights `version`)."""
        if self.workers is None:
            return sample_groups(sampler, tasks, self.config, seed)
        self.workers.submit(version, sampler.state_dict(), tasks, seed)
        return self.workers.next()[1]

    def _refill(self, sampler, version: int, chosen: list, groups: list, s: LoopState) -> int:
        """Dynamic sampling: replace all-equal groups by groups of other tasks, in place; returns
        the episodes sampled for it."""
        config, pool, sampled = self.config, self.pool, 0
        for _ in range(config.max_refills if config.dynamic_sampling else 0):
            bad = degenerate_groups(group_rewards(groups)).nonzero().flatten().tolist()
            if not bad:
                break
            used = {t.name for t in chosen}
            fresh = [t for t in pool if t.name not in used] or pool
            if len(fresh) >= len(bad):
                new_tasks = s.rng.sample(fresh, len(bad))
            else:
                new_tasks = [s.rng.choice(fresh) for _ in bad]
            new = self._sample(sampler, version, new_tasks, s.rng.randrange(2**31))
            sampled += len(new_tasks) * config.group_size
            for j, i in enumerate(bad):
                if not degenerate_groups(group_rewards([new[j]]))[0]:
                    groups[i], chosen[i] = new[j], new_tasks[j]
        return sampled

    def _ahead(self, model: TinyAgent, s: LoopState, step: int) -> tuple[list[Task], list, int]:
        """Async: the first finished job within the staleness bound: (tasks, groups, lag)."""
        k = self.config.tasks_per_step
        by_name = {t.name: t for t in self.pool}  # a job's groups name the tasks it drew
        while True:
            while self.workers.idle:  # keep every worker busy, from the newest weights
                planned = choose_tasks(self.pool, s, k, step)
                self.workers.submit(step - 1, model.state_dict(), planned, s.rng.randrange(2**31))
            version, groups = self.workers.next()
            lag = step - 1 - version  # optimizer steps since those weights
            if lag <= self.config.staleness:
                return [by_name[g[0].task] for g in groups], groups, lag
            self.dropped += 1

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
