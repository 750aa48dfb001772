"""Policy metrics: pass rates, malformed calls, reading, turns, and action entropy.

`run_policy` is the one way to measure any policy (a scripted name, a TinyAgent or a real
model) on tasks of any environment: it samples episodes and summarizes them with `summarize`
(the shared outcome fields, then the environment's own summary, e.g. CodeFix's apply rate).
Episodes whose grading failed for infrastructure reasons are left out of every rate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from arl.batch import collate
from arl.env import Task, environment_of_tasks
from arl.losses import token_logprobs
from arl.model import TinyAgent
from arl.rollout import Opening, episode_seed, rollout_batch, scripted_rollout
from arl.types import ENV, OWNER_NAMES, POLICY, PROMPT, TEMPLATE, Trajectory


def graded(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """The episodes the grader scored: an infrastructure failure is not a zero, it is left out."""
    return [t for t in trajs if not t.outcome.infra_error]


def environment_summary(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """The environment's own episode means (BugFix: none; CodeFix: edits and their apply rate),
    and the count of episodes left out for infrastructure failures, where there were any."""
    if not trajs:
        return {}
    environment = environment_of_tasks([trajs[0].outcome])  # an outcome names its env too
    own = getattr(environment, "summary", None)
    out = own([t.outcome for t in graded(trajs)]) if own is not None else {}
    failed = len(trajs) - len(graded(trajs))
    return out | ({"infra_errors": failed} if failed else {})


def summarize(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Episode-level means: hidden and public pass rates, malformed calls, reads, turns, then
    the environment's own (`environment_summary`)."""
    scored = graded(trajs)
    outs = [t.outcome for t in scored]
    mean = lambda xs: float(np.mean([float(x) for x in xs])) if xs else 0.0  # noqa: E731
    pass_rate, public = mean([o.hidden_pass for o in outs]), mean([o.public_pass for o in outs])
    return {
        "episodes": len(trajs),
        "pass_rate": pass_rate,
        "public_pass_rate": public,
        "public_hidden_gap": public - pass_rate,
        "reward": mean([t.reward for t in scored]),
        "malformed_per_episode": mean([o.malformed for o in outs]),
        "read_fraction": mean([o.read for o in outs]),
        "mean_turns": mean([o.turns for o in outs]),
        "hack_rate": mean([o.hacked for o in outs]),
        "truncated_fraction": mean([o.truncated for o in outs]),
        **environment_summary(trajs),
    }


def sampler_entropy_sums(trajs: Sequence[Trajectory]) -> tuple[float, int, float, int]:
    """Sums and counts of the sampler's recorded entropies (Trajectory.entropy_T): over every
    policy token, and over each episode's first policy token. No forward pass."""
    total, count, first_total, first_count = 0.0, 0, 0.0, 0
    for tr in trajs:
        on = [h for h, o in zip(tr.entropy_T, tr.owners_T, strict=True) if o == POLICY]
        total, count = total + sum(on), count + len(on)
        if on:
            first_total, first_count = first_total + on[0], first_count + 1
    return total, count, first_total, first_count


@torch.no_grad()
def recomputed_entropy_sums(model: TinyAgent, trajs: Sequence[Trajectory], batch_size: int = 64):
    """The same sums as `sampler_entropy_sums`, from a forward pass of `model` over the
    finished episodes (for episodes the sampler did not record, or another model's)."""
    was_training = model.training
    model.eval()
    total, count, first_total, first_count = 0.0, 0, 0.0, 0
    for i in range(0, len(trajs), batch_size):
        batch = collate(trajs[i : i + batch_size])
        _, ent = token_logprobs(model, batch, with_entropy=True)  # (B, T)
        total += float((ent * batch.action_mask).sum())
        count += int(batch.action_mask.sum())
        first = (batch.owners == POLICY).float().argmax(1)  # (B,) first policy target
        has = batch.action_mask.sum(1) > 0
        first_total += float(ent[torch.arange(len(first)), first][has].sum())
        first_count += int(has.sum())
    model.train(was_training)
    return total, count, first_total, first_count


def action_entropy(
    model: TinyAgent, trajs: Sequence[Trajectory], batch_size: int = 64, recompute: bool = False
) -> tuple[float, float]:
    """Mean next-token entropy (nats, temperature 1) on policy tokens only, and on first calls only.

    Returns (all action tokens, first token of each episode's first call). Episodes that carry
    the sampler's entropies (entropy_T: rollout_batch records them) are read, with no forward
    pass; that is `model`'s entropy only if `model` sampled them and has not changed since.
    The others (scripted, forced, loaded) go through a forward pass of `model`; `recompute`:
    all of them (another model's entropy on these episodes, or the same model after training).
    At temperature != 1 or top_p < 1 the recorded value is still the temperature-1 policy's
    entropy, at the states the tempered sampler visited.
    """
    stored = [] if recompute else [t for t in trajs if t.entropy_T is not None]
    rest = [t for t in trajs if recompute or t.entropy_T is None]
    sums = [sampler_entropy_sums(stored)]
    if rest:
        sums.append(recomputed_entropy_sums(model, rest, batch_size))
    total, count, first_total, first_count = (sum(x) for x in zip(*sums, strict=True))
    return total / max(count, 1), first_total / max(first_count, 1)


def run_policy(
    policy: TinyAgent | str,
    tasks: Sequence[Task],
    samples: int = 4,
    seed: int = 0,
    env_config=None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    batch_size: int = 128,
    wrap_obs: bool = True,
    opening: Opening = (),
    progress: Callable[[str], None] | None = None,
) -> list[Trajectory]:
    """`samples` episodes per task, task-major order (task 0 sample 0, task 0 sample 1, ...);
    `opening`: a first call forced on each model episode (rollout_batch: its words, or a
    function of the episode's env); `progress(text)`:
    told where the sampling is, at every decoding step of a model (`arl eval --model` paces
    it into a line every few seconds)."""
    jobs = [t for t in tasks for _ in range(samples)]
    if isinstance(policy, str):
        return [
            scripted_rollout(
                policy, t, seed=episode_seed(seed, k), env_config=env_config, wrap_obs=wrap_obs
            )
            for k, t in enumerate(jobs)
        ]
    out: list[Trajectory] = []
    n = len(jobs)
    for i in range(0, n, batch_size):
        said = None
        if progress is not None:
            said = lambda done, _b, i=i: progress(f"{i + done}/{n} episodes finished")  # noqa: E731
        out += rollout_batch(
            policy,
            jobs[i : i + batch_size],
            seed=episode_seed(seed, i),
            env_config=env_config,
            temperature=temperature,
            top_p=top_p,
            wrap_obs=wrap_obs,
            opening=opening,
            on_step=said,
        )
    return out


def evaluate(
    policy: TinyAgent | str, tasks: Sequence[Task], samples: int = 4, seed: int = 0, **kw
) -> tuple[dict[str, float], list[Trajectory]]:
    """Run a policy and summarize it; model policies also get their action entropy."""
    trajs = run_policy(policy, tasks, samples, seed, **kw)
    metrics = summarize(trajs)
    if isinstance(policy, TinyAgent):
        metrics["action_entropy"], metrics["first_call_entropy"] = action_entropy(policy, trajs)
    return metrics, trajs


def token_accounting(trajs, vocab_size: int) -> dict:
    """Where the predicted positions of a set of episodes fall, by owner (Section 15.1), and
    the size of the policy's vocabulary."""
    counts = {o: 0 for o in OWNER_NAMES}
    for tr in trajs:
        for owner in tr.owners_T[1:]:  # predicted positions: every token after the first
            counts[owner] += 1
    total = sum(counts.values())
    return {
        "episodes": len(trajs),
        "predicted_positions": total,
        "action_positions": counts[POLICY],
        "observation_positions": counts[ENV],
        "template_positions": counts[TEMPLATE],
        "prompt_positions": counts[PROMPT],
        "action_share": counts[POLICY] / total,
        "observation_share": counts[ENV] / total,
        "vocab_size": vocab_size,
    }
