"""What the PG trainer logs each step (rollout statistics, update diagnostics, evaluations) and
where: RunLog writes out/metrics.jsonl, keeping on resume the rows an uninterrupted run has."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arl.env import SPLITS, Task, get_environment
from arl.errors import ArlError
from arl.eval.metrics import environment_summary, graded, run_policy
from arl.logging_bridge import Sink, scalars
from arl.model import TinyAgent
from arl.runio import append_jsonl, atomic_write_json, atomic_write_text, dumps_finite, read_jsonl
from arl.train.pg_config import PGConfig
from arl.train.pg_losses import PGLoss
from arl.train.samples import sample_due
from arl.types import Trajectory

REF_KEYS = ("kl/ref_k3", "kl/ref_absq99")
MISMATCH_KEYS = ("mismatch/mean", "mismatch/p999")
# the KL term's and the policy-gradient term's gradient norms, and their cosine (Problem 6)
GRAD_KEYS = ("kl/grad_norm", "pg/grad_norm", "kl/grad_cos")


def _pct(values: list[int], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def quantile(parts: list[torch.Tensor], q: float) -> float:
    """The q-quantile of the concatenated parts (0 when empty)."""
    x = torch.cat(parts) if parts else torch.zeros(0)
    return float(torch.quantile(x, q)) if x.numel() else 0.0


def mismatch_stats(abs_parts: list[torch.Tensor]) -> dict[str, float]:
    """The training-inference mismatch (Problem 20): the mean and the 99.9th percentile of
    |log pi_prox - log mu| over the policy tokens of the concatenated parts (0 when empty)."""
    x = torch.cat(abs_parts) if abs_parts else torch.zeros(0)  # (N,) one per policy token
    if not x.numel():
        return dict.fromkeys(MISMATCH_KEYS, 0.0)
    return {"mismatch/mean": float(x.mean()), "mismatch/p999": quantile([x], 0.999)}


def grad_parts(total: Sequence[torch.Tensor], kl: Sequence[torch.Tensor]) -> dict[str, float]:
    """The gradient split into the KL term's (`kl`, one tensor per parameter) and the rest's,
    the policy gradient's (total - kl): their global norms and the cosine between them (0 when
    either is zero; negative: the penalty pulls against the reward)."""
    g_kl = torch.cat([g.reshape(-1) for g in kl])  # (P,) every parameter
    g_pg = torch.cat([(t - g).reshape(-1) for t, g in zip(total, kl, strict=True)])  # (P,)
    n_kl, n_pg = float(g_kl.norm()), float(g_pg.norm())
    cos = float(g_kl @ g_pg) / (n_kl * n_pg) if n_kl > 0 and n_pg > 0 else 0.0
    return {"kl/grad_norm": n_kl, "pg/grad_norm": n_pg, "kl/grad_cos": cos}


def grad_ratio(kl_norm: float, pg_norm: float) -> float | None:
    """How far the penalty binds: the KL term's gradient norm over the policy gradient's (the
    book's "the reward gradient no longer outweighs the penalty gradient" at >= 1); None when
    the policy gradient is zero (every advantage 0: nothing for the penalty to outweigh)."""
    return kl_norm / pg_norm if pg_norm > 0 else None


def rollout_metrics(trajs: Sequence[Trajectory], config: PGConfig) -> dict[str, Any]:
    """What a dashboard shows about one step's episodes (Problems 7, 12, 13, 27), then the
    environment's own (CodeFix: the edit-apply rate, Problem 14). Episodes whose grading
    failed for infrastructure reasons are left out of the rates, and counted."""
    everything, trajs = trajs, graded(trajs)
    outs = [t.outcome for t in trajs]
    hidden = float(np.mean([o.hidden_pass for o in outs]))
    public = float(np.mean([o.public_pass for o in outs]))
    scored = lambda o: o.submitted or config.env.truncation == "score"  # noqa: E731
    succ = [t.n_action_tokens for t in trajs if t.passed]
    fail = [t.n_action_tokens for t in trajs if not t.passed]
    caught = sum(o.hacked and scored(o) and config.env.zero_exploits for o in outs)
    return {
        "reward": float(np.mean([t.reward for t in trajs])),
        "pass_rate": hidden,
        "public_pass_rate": public,
        "public_hidden_gap": public - hidden,
        "hack_rate": float(np.mean([o.hacked for o in outs])),
        "hacks_caught": int(caught),
        "malformed_per_episode": float(np.mean([o.malformed for o in outs])),
        "truncated_frac": float(np.mean([o.truncated for o in outs])),
        "final_state_pass": float(np.mean([o.hidden_fraction == 1.0 for o in outs])),
        "hidden_fraction": float(np.mean([o.hidden_fraction for o in outs])),
        "immediate_submit_frac": float(np.mean([o.first_call == "submit" for o in outs])),
        "mean_turns": float(np.mean([o.turns for o in outs])),
        "len_success_p50": _pct(succ, 50),
        "len_success_p90": _pct(succ, 90),
        "len_failure_p50": _pct(fail, 50),
        "len_failure_p90": _pct(fail, 90),
        **environment_summary(everything),
    }


def update_metrics(
    stats: list[dict[str, float]], grad_norms: list[float], minibatches: int, loss: PGLoss
):
    """One step's update diagnostics: first-pass means (every episode once, against the fixed
    pi_prox) of the token statistics (the gradient split's over the updates that measured it:
    the first); the loss's own statistics (ppo: clip_frac, capped_frac), each over the first
    pass or, if the loss says so, every update; loss and gradient norm over all updates."""
    first = {k: float(np.mean([s[k] for s in stats[:minibatches] if k in s])) for k in stats[0]}
    every = set(loss.every_update)
    return {
        "entropy": first["entropy"],
        **{
            k: float(np.mean([s[k] for s in stats])) if k in every else first[k] for k in loss.stats
        },
        "kl/mu_k3": first["kl/mu_k3"],
        "kl/mu_absq99": first["kl/mu_absq99"],
        **{k: first[k] for k in MISMATCH_KEYS},
        **{k: first[k] for k in REF_KEYS if k in first},
        **grad_split(first),
        "grad_norm": float(np.mean(grad_norms)),
        "loss": float(np.mean([s["loss"] for s in stats])),
    }


def grad_split(first: dict[str, float]) -> dict[str, float | None]:
    """The KL and policy-gradient norms and cosine of the updates that split the gradient (the
    step's first), and the ratio of the norms, `kl/grad_ratio` (nothing when none split it)."""
    if "kl/grad_norm" not in first:
        return {}
    ratio = grad_ratio(first["kl/grad_norm"], first["pg/grad_norm"])
    return {**{k: first[k] for k in GRAD_KEYS}, "kl/grad_ratio": ratio}


def evaluate_tasks(
    model: TinyAgent, splits: dict[str, Sequence[Task]], config: PGConfig
) -> dict[str, float]:
    """Hidden-test pass rate on each split's tasks (same seed every time), scored as `arl eval`
    scores (the environment's `eval_config`), with the environment's own means of the same
    episodes (CodeFix: `eval/train_apply_rate`, ...; None ones left out)."""
    out = {}
    for split, tasks in splits.items():
        trajs = run_policy(
            model,
            tasks,
            samples=config.eval_samples,
            seed=config.seed + 10_007,
            env_config=config.env.eval_config(),
        )
        out[f"eval/{split}_pass"] = float(np.mean([t.passed for t in graded(trajs)] or [0.0]))
        own = environment_summary(trajs).items()
        out |= {f"eval/{split}_{k}": float(v) for k, v in own if v is not None}
    return out


def evaluate_splits(model: TinyAgent, config: PGConfig) -> dict[str, float]:
    """evaluate_tasks on config.env's train and held-out splits."""
    environment = get_environment(config.env.name)
    return evaluate_tasks(model, {split: environment.tasks(split) for split in SPLITS}, config)


def is_finite_history(history: Sequence[dict]) -> bool:
    """True if every float metric is finite (a cheap divergence guard for tests)."""
    return all(math.isfinite(v) for r in history for v in r.values() if isinstance(v, float))


def kept_metrics(path: Path, start: int, config: PGConfig, steps: int) -> list[dict]:
    """The log rows a resume from step `start` keeps: those an uninterrupted run has too.

    An evaluation logged at `start` only because it was the old last step is dropped.
    """
    if not start or not path.exists():
        return []
    rows = read_jsonl(path)
    for i, r in enumerate(rows, start=1):
        if not isinstance(r.get("step"), int) or isinstance(r["step"], bool):
            raise ArlError(f"{path}: record {i} has no step; the log was edited or damaged")
    rows = [r for r in rows if r["step"] <= start]
    regular = config.eval_every and start % config.eval_every == 0
    return [r for r in rows if r["step"] < start or "reward" in r or regular or start == steps]


def kept_samples(path: Path, start: int, config: PGConfig, steps: int) -> list[dict]:
    """The samples.jsonl rows a resume from step `start` keeps: those an uninterrupted run
    wrote too (a sample at `start` only because it was the old last step is dropped)."""
    if not start or not path.exists():
        return []
    rows = [r for r in read_jsonl(path) if isinstance(r.get("step"), int)]
    again = sample_due(start, config.eval_every, steps)
    return [r for r in rows if r["step"] < start or (r["step"] == start and again)]


class RunLog:
    """Each record to the history, out/metrics.jsonl (after the rows a resume keeps) and the
    sink; out/config.json says what the run used; `samples` adds episodes' text to
    out/samples.jsonl."""

    def __init__(self, out: Path | None, config: PGConfig, start: int, steps: int, sink=None):
        self.history: list[dict] = []
        self.sink: Sink | None = sink
        self.file = self.samples_file = None
        if out is not None:
            path = out / "metrics.jsonl"
            keep = kept_metrics(path, start, config, steps)  # read (and checked) before any write
            from arl.env import run_record as record

            # with "sandbox": "bwrap" or "none" where the environment runs policy code
            atomic_write_json(out / "config.json", asdict(config) | record(config.env))
            atomic_write_text(path, "".join(dumps_finite(r) + "\n" for r in keep))
            self.file = path.open("a", encoding="utf-8")
            shown = out / "samples.jsonl"
            kept = kept_samples(shown, start, config, steps)
            atomic_write_text(shown, "".join(dumps_finite(r) + "\n" for r in kept))
            self.samples_file = shown.open("a", encoding="utf-8")

    def __call__(self, record: dict) -> None:
        self.history.append(record)
        if self.file is not None:
            append_jsonl(self.file, record)
        if self.sink is not None:
            self.sink.log(record["step"], scalars(record))

    def samples(self, rows: Sequence[dict]) -> None:
        """Episodes as text (arl.train.samples) to out/samples.jsonl; nothing without `out`."""
        if self.samples_file is not None:
            for row in rows:
                append_jsonl(self.samples_file, row)

    def close(self) -> None:
        for f in (self.file, self.samples_file):
            if f is not None:
                f.close()
