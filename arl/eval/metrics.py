"""Policy metrics: pass rates, malformed calls, reading, turns, and action entropy.

`run_policy` is the one way to measure any policy (a scripted name, a TinyAgent or a real
model) on tasks of any environment: it samples episodes and summarizes them with `summarize`
(the shared outcome fields, then the environment's own summary, e.g. CodeFix's apply rate).
Episodes whose grading failed for infrastructure reasons are left out of every rate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from arl.batch import collate
from arl.env import Task, environment_of_tasks
from arl.errors import ArlError
from arl.gym.environment import default_vocab
from arl.gym.families import ACCUMULATORS
from arl.gym.grammar import END, Call, parse_call, prompt_words, source_words
from arl.losses import token_logprobs
from arl.model import TinyAgent
from arl.rollout import episode_seed, rollout_batch, scripted_rollout
from arl.text import Transcript
from arl.types import ENV, OWNER_NAMES, POLICY, PROMPT, TEMPLATE, Observation, Trajectory


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


@torch.no_grad()
def action_entropy(model: TinyAgent, trajs: Sequence[Trajectory], batch_size: int = 64):
    """Mean next-token entropy (nats, temperature 1) on policy tokens only, and on first calls only.

    Returns (all action tokens, first token of each episode's first call).
    """
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
) -> list[Trajectory]:
    """`samples` episodes per task, task-major order (task 0 sample 0, task 0 sample 1, ...)."""
    jobs = [t for t in tasks for _ in range(samples)]
    if isinstance(policy, str):
        return [
            scripted_rollout(policy, t, seed=episode_seed(seed, k), env_config=env_config,
                             wrap_obs=wrap_obs)
            for k, t in enumerate(jobs)
        ]  # fmt: skip
    out: list[Trajectory] = []
    for i in range(0, len(jobs), batch_size):
        out += rollout_batch(
            policy, jobs[i : i + batch_size], seed=episode_seed(seed, i), env_config=env_config,
            temperature=temperature, top_p=top_p, wrap_obs=wrap_obs,
        )  # fmt: skip
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


@torch.no_grad()
def copy_probe(model: TinyAgent, tasks: Sequence[Task]) -> dict[str, float]:
    """Does the policy copy the accumulator it was shown? (the `init` family's skill)

    For every init task and every name in ACCUMULATORS, feed the oracle's prefix (the
    issue, `read`, the listing with that accumulator, `edit init`) and check whether
    the most likely next token is the name shown. A policy that emits a memorized
    name scores about 1 / len(ACCUMULATORS).
    """
    vocab = default_vocab()
    rows: list[tuple[list[int], int]] = []
    for task in (t for t in tasks if t.family == "init"):
        for name in ACCUMULATORS:
            tr = Transcript.begin(prompt_words(task.name), vocab)
            for word in ("read", END):
                tr.act(vocab.id(word))
            words = source_words(task.renamed(name).buggy_source)
            tr.observe(Observation(tuple(words), ""))
            for word in ("edit", "init"):
                tr.act(vocab.id(word))
            rows.append((tr.ids, vocab.id(name)))
    if not rows:
        raise ArlError("the copy probe needs at least one init task")
    was_training = model.training
    model.eval()
    L = max(len(ids) for ids, _ in rows)
    x = torch.tensor([ids + [0] * (L - len(ids)) for ids, _ in rows])  # (N, L), right-padded
    logits, _ = model(x)  # (N, L, V); causal, so padding after a row's end changes nothing
    last = torch.tensor([len(ids) - 1 for ids, _ in rows])  # (N,)
    guess = logits[torch.arange(len(rows)), last].argmax(-1)  # (N,)
    target = torch.tensor([t for _, t in rows])  # (N,)
    model.train(was_training)
    return {"copy_rate": float((guess == target).float().mean()), "probes": len(rows)}


def first_edit_op(traj: Trajectory, vocab=None) -> str | None:
    """The op of an episode's first well-formed `edit` call (TinyAgent's words), or None."""
    vocab = vocab or default_vocab()
    for start, end in traj.calls:
        call = parse_call(vocab.decode(traj.ids_T[start:end]))
        if isinstance(call, Call) and call.tool == "edit":
            return call.op
    return None


def op_choice(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Shares of episodes whose first edit uses their family's fixing op, another op, or that
    never edit: a wrong decision, not a broken call (Section 15.6's template mismatch)."""
    if not trajs:
        raise ArlError("op_choice needs at least one episode")
    vocab = default_vocab()
    counts = {"right_op": 0, "wrong_op": 0, "no_edit": 0}
    for t in trajs:
        op = first_edit_op(t, vocab)  # each family's fixing op is named after the family
        right = op == t.outcome.family
        counts["no_edit" if op is None else "right_op" if right else "wrong_op"] += 1
    return {k: n / len(trajs) for k, n in counts.items()}


def token_accounting(trajs, vocab_size: int | None = None) -> dict:
    """Where the predicted positions of a set of episodes fall, by owner (Section 15.1);
    `vocab_size`: the policy's (BugFix's by default)."""
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
        "vocab_size": vocab_size or len(default_vocab()),
    }
