"""Rejection-sampling fine-tuning and expert iteration (Section 15.3).

Each round samples episodes from the current policy, keeps those the filter accepts,
and runs SFT on the kept set, continuing from the last model. It is a policy
gradient with a 0/1 reward, its step divided by the success rate and without the
negative term (`gradient_identity` checks this on a real batch).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from arl.batch import collate
from arl.checks import check, check_seed
from arl.env import Task, environment_of_tasks
from arl.errors import ArlError
from arl.eval.metrics import graded, run_policy
from arl.logging_bridge import Sink, log_record
from arl.losses import pg_loss, sft_loss, token_logprobs
from arl.model import TinyAgent
from arl.rollout import renderer_of
from arl.train.common import Hook
from arl.train.sft import SFTConfig, sft_train
from arl.types import Trajectory

FILTERS = ("hidden", "public")


@dataclass(frozen=True)
class RFTConfig:
    """Expert iteration. Defaults are Section 15.3's: 4 rounds x 16 episodes per task x 15 steps."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"filter": FILTERS}
    rounds: int = 4  # sample -> filter -> fine-tune rounds
    samples_per_task: int = 16  # episodes per training task per round
    steps_per_round: int = 15  # SFT steps on each round's kept set
    lr: float = 1e-3  # AdamW learning rate (4-round sweep, train pass: 3e-4 0.33, 1e-3 0.38)
    batch_size: int = 16  # kept episodes per SFT minibatch
    filter: str = "hidden"  # keep episodes passing hidden tests, or public ones (hackable)
    dedup: bool = False  # keep one episode per distinct action sequence
    cap_per_task: int = 0  # at most this many kept episodes per task (0: no cap)
    temperature: float = 1.0  # sampling temperature
    group_baseline: bool = False  # also train on each task's failures, weight -Rbar/(1-Rbar)
    seed: int = 0  # round r samples and fine-tunes with seed * 100 + r; the cap draws from seed

    def __post_init__(self) -> None:
        if self.filter not in FILTERS:
            raise ArlError(f"filter: unknown {self.filter!r} (choose from hidden, public)")
        check("rounds", self.rounds, 1, 10_000, integer=True)
        check("samples_per_task", self.samples_per_task, 1, 4096, integer=True)
        check("steps_per_round", self.steps_per_round, 1, 10_000_000, integer=True)
        check("lr", self.lr, 0, 1.0, open_lo=True)  # each round's SFTConfig checks it so
        check("batch_size", self.batch_size, 1, 4096, integer=True)
        check("cap_per_task", self.cap_per_task, 0, None, integer=True)
        check("temperature", self.temperature, 0, 1e6, open_lo=True)
        check_seed("seed", self.seed)


def accepts(tr: Trajectory, filter: str) -> bool:
    """The filter: hidden tests (the default), or public tests, which hardcode_tests fools."""
    return bool(tr.outcome.hidden_pass if filter == "hidden" else tr.outcome.public_pass)


def dedup_by_actions(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """One episode per (task, action sequence), first come first kept."""
    seen: set = set()
    out = []
    for tr in trajs:
        key = (tr.task, tr.action_ids)
        if key not in seen:
            seen.add(key)
            out.append(tr)
    return out


def cap_per_task(trajs: Sequence[Trajectory], cap: int, rng: random.Random) -> list[Trajectory]:
    """At most `cap` episodes per task, chosen at random (order otherwise kept)."""
    by_task: dict[str, list[int]] = {}
    for i, tr in enumerate(trajs):
        by_task.setdefault(tr.task, []).append(i)
    keep = {i for idx in by_task.values() for i in rng.sample(idx, min(cap, len(idx)))}
    return [tr for i, tr in enumerate(trajs) if i in keep]


def first_call(tr: Trajectory, renderer=None) -> str:
    """The text of an episode's first call, e.g. 'read' or 'edit minmax' (`renderer`: the
    policy's; TinyAgent's words by default)."""
    s, e = tr.calls[0]
    return (renderer or renderer_of()).call_text(tr.ids_T[s:e])


def kept_diagnostics(kept: Sequence[Trajectory], tasks: Sequence[Task], renderer=None) -> dict:
    """What the kept set holds: per-family share, unsolved tasks, first calls, distinct paths."""
    n = max(len(kept), 1)
    environment = environment_of_tasks(tasks)
    family = {t.name: t.family for t in tasks}
    fam = Counter(family[tr.task] for tr in kept)
    unique = dedup_by_actions(kept)
    fam_dedup = Counter(family[tr.task] for tr in unique)
    firsts = Counter(first_call(tr, renderer) for tr in kept)
    solved = {tr.task for tr in kept}
    return {
        "kept": len(kept),
        "distinct_action_sequences": len(unique),
        "family_share": {f: fam[f] / n for f in environment.families},
        "family_share_dedup": {f: fam_dedup[f] / max(len(unique), 1) for f in environment.families},
        "tasks_never_kept": sorted(t.name for t in tasks if t.name not in solved),
        "first_calls": dict(firsts.most_common()),
        "first_call_read_share": firsts["read"] / n,
        "hack_share": sum(tr.outcome.hacked for tr in kept) / n,
        "hacks": sum(tr.outcome.hacked for tr in kept),
    }


def select(trajs: Sequence[Trajectory], config: RFTConfig, rng: random.Random) -> list:
    """Filter, then optionally deduplicate and cap: the kept set of one round (an episode
    whose grading failed for infrastructure reasons is neither kept nor a failure)."""
    kept = [tr for tr in graded(trajs) if accepts(tr, config.filter)]
    if config.dedup:
        kept = dedup_by_actions(kept)
    if config.cap_per_task:
        kept = cap_per_task(kept, config.cap_per_task, rng)
    return kept


def baseline_weights(
    samples: Sequence[Trajectory], kept: Sequence[Trajectory], filter: str
) -> tuple[list[Trajectory], list[float]]:
    """RFT with a group baseline (Chapter 15, Exercise 4): the kept episodes with weight 1, and
    the rejected ones of each task (its group) with weight -Rbar/(1-Rbar), Rbar the task's
    accept rate. Per group these are the mean-baseline advantages r - Rbar over 1 - Rbar, so
    their gradient is the baseline policy gradient's, each group's scaled by 1/(1 - Rbar)."""
    groups: dict[str, list[bool]] = {}
    for tr in graded(samples):
        groups.setdefault(tr.task, []).append(accepts(tr, filter))
    rate = {task: sum(v) / len(v) for task, v in groups.items()}
    failed = [tr for tr in graded(samples) if not accepts(tr, filter) and rate[tr.task] > 0]
    weights = [1.0] * len(kept) + [-rate[tr.task] / (1 - rate[tr.task]) for tr in failed]
    return [*kept, *failed], weights


def expert_iteration(
    model: TinyAgent,
    tasks: Sequence[Task],
    config: RFTConfig = RFTConfig(),
    hook: Hook | None = None,
    env_config=None,
    sink: Sink | None = None,
) -> list[dict]:
    """Run the rounds in place; one record per round (sample stats, kept-set diagnostics, the
    round's lr, and what hook(round, model) returns after the round's fine-tuning), also sent
    to `sink` at step = optimizer steps so far. `env_config`: the tasks' environment's config
    (its default when None)."""
    rng = random.Random(config.seed)
    renderer = renderer_of(model, environment=environment_of_tasks(tasks))
    history = []
    for r in range(config.rounds):
        samples = run_policy(
            model,
            tasks,
            config.samples_per_task,
            seed=config.seed * 100 + r,
            temperature=config.temperature,
            env_config=env_config,
        )
        kept = select(samples, config, rng)
        record = {
            "round": r,
            "sampled": len(samples),
            "sample_pass_rate": sum(t.passed for t in samples) / len(samples),
            "filter_pass_rate": sum(accepts(t, config.filter) for t in samples) / len(samples),
            **kept_diagnostics(kept, tasks, renderer),
        }
        if kept:
            sft = SFTConfig(
                steps=config.steps_per_round,
                batch_size=config.batch_size,
                lr=config.lr,
                seed=config.seed * 100 + r,
            )
            data, weights = list(kept), None
            if config.group_baseline:
                data, weights = baseline_weights(samples, kept, config.filter)
            sft_train(model, data, sft, hook_every=0, weights=weights)
        record["steps"] = (r + 1) * config.steps_per_round
        record["lr"] = config.lr  # each round's SFT: a constant rate
        if hook is not None:
            record |= hook(r, model) or {}
        history.append(record)
        log_record(sink, record, step=record["steps"])
    return history


def _flat_grad(model: TinyAgent) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def gradient_identity(model: TinyAgent, trajs: Sequence[Trajectory]) -> dict:
    """Check Section 15.3 on a real batch.

    The token-mean policy gradient with 0/1 rewards equals the token-mean SFT
    gradient on the kept episodes times (kept action tokens)/(all action tokens).
    With a mean baseline the failures add a push-down term and the cosine drops.
    """
    batch = collate(trajs)
    rewards = torch.tensor([float(t.passed) for t in trajs])  # (B,)
    kept = rewards.bool()
    if not kept.any() or kept.all():
        raise ArlError("the identity needs both successes and failures in the batch")

    def grad_of(loss_fn) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss_fn(token_logprobs(model, batch)).backward()
        return _flat_grad(model).clone()

    g_pg = grad_of(lambda lp: pg_loss(lp, rewards, batch.action_mask))
    g_sft = grad_of(lambda lp: sft_loss(lp[kept], batch.action_mask[kept]))
    g_base = grad_of(lambda lp: pg_loss(lp, rewards - rewards.mean(), batch.action_mask))
    model.zero_grad(set_to_none=True)
    token_ratio = float(batch.action_mask[kept].sum() / batch.action_mask.sum())
    fitted = float(g_pg @ g_sft / (g_sft @ g_sft))  # least-squares ratio of g_pg to g_sft
    cos = torch.nn.functional.cosine_similarity
    return {
        "episodes": len(trajs),
        "successes": int(kept.sum()),
        "kept_token_ratio": token_ratio,
        "fitted_ratio": fitted,
        "max_abs_error": float((g_pg - token_ratio * g_sft).abs().max()),
        "relative_error": float((g_pg - token_ratio * g_sft).norm() / g_pg.norm()),
        "cosine_pg_sft": float(cos(g_pg, g_sft, dim=0)),
        "cosine_mean_baseline_sft": float(cos(g_base, g_sft, dim=0)),
        "success_rate": float(rewards.mean()),
    }
