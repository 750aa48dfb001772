"""Policy gradient on the BugFix gym (Chapter 9 and Appendix B), one loop with every knob.

Each step: pick tasks, roll out G episodes of each with the sampler's weights (k steps
old under simulated async sampling), score them, turn rewards into group advantages,
and take `epochs x minibatches` optimizer steps on the clipped, importance-weighted
surrogate, accumulating microbatch gradients under a normalizer counted before any
backward pass. The math lives in arl/losses.py; this file is the loop.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import random
import re
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arl.batch import Batch, collate
from arl.checks import check, check_seed
from arl.errors import ArlError, Diverged
from arl.gym.env import REWARDS, TRUNCATIONS, EnvConfig
from arl.gym.tasks import SPLITS, Task, tasks_for
from arl.logging_bridge import OWNED as SINK_OWNED
from arl.logging_bridge import Sink, scalars
from arl.losses import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    clipped_surrogate,
    degenerate_groups,
    entropy_controller,
    group_advantages,
    kl_k3,
    kl_to_reference,
    loss_weights,
    policy_logprobs,
    truncated_is_weights,
)
from arl.model import TinyAgent, load_checkpoint, nonfinite_tensor, read_meta, save_checkpoint
from arl.rollout import rollout_batch
from arl.runio import (
    TMP_PREFIX,
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    claim_output_dir,
    dumps_finite,
    fsync_dir,
    read_jsonl,
)
from arl.types import POLICY, Trajectory

Hook = Callable[[int, TinyAgent], dict | None]  # (step, model) -> metrics to log
TIMING_KEYS = ("time/sample", "time/train", "time/step")  # the only non-deterministic metrics


MAX_FLOAT = 1e6  # no coefficient, penalty or temperature of a run is anywhere near this
MAX_EPISODES_PER_STEP = 4096  # one step's rollouts and batch must fit in memory
# field: (lo, hi) of the integers and finite floats of PGConfig (None: no bound)
INT_RANGES = {
    "steps": (0, 10_000_000), "tasks_per_step": (1, 4096), "group_size": (1, 4096),
    "max_turns": (1, 64), "epochs": (1, 1000), "minibatches": (1, 4096),
    "microbatch_size": (0, 4096), "flaky_votes": (1, 99), "eval_samples": (1, 1000),
    "keep_checkpoints": (1, 1000), "max_refills": (0, 100), "filter_cooldown": (0, 10_000_000),
    "staleness": (0, 1000), "eval_every": (0, 10_000_000), "save_every": (0, 10_000_000),
    "ref_reset_every": (0, 10_000_000), "mask_shift": (0, 1),
}  # fmt: skip
FLOAT_RANGES = {
    "step_penalty": (0, MAX_FLOAT), "weight_decay": (0, MAX_FLOAT), "grad_clip": (0, MAX_FLOAT),
    "kl_beta": (0, MAX_FLOAT), "entropy_coef": (0, MAX_FLOAT), "target_entropy": (0, MAX_FLOAT),
    "entropy_lr": (0, MAX_FLOAT), "clip_high": (0, MAX_FLOAT), "mixed_alpha": (0, MAX_FLOAT),
    "flaky_prob": (0, 0.5), "is_cap": (1, MAX_FLOAT),
}  # fmt: skip


@dataclass(frozen=True)
class PGConfig:
    """One policy-gradient run. Defaults are Appendix B's recommendations for verifier rewards."""

    steps: int = 60  # optimizer-step rounds (one batch of rollouts each)
    seed: int = 0  # task choice, sampling, minibatch order
    split: str = "train"  # task pool to train on (when train_pg is not given tasks)
    tasks_per_step: int = 8  # distinct tasks (prompts) per step
    group_size: int = 8  # G: episodes per task, for the group baseline (Problem 3)
    temperature: float = 1.0  # sampling temperature; the trainer scores at the same one
    top_p: float = 1.0  # nucleus sampling (not reproduced by the trainer: keep 1.0 for RL)
    # --- environment and reward (Problems 7, 8, 9, 12, 13)
    reward: str = "hidden"  # hidden | public | fraction | mixed
    mixed_alpha: float = 0.1  # mixed reward = 1[all hidden pass] + alpha * hidden fraction
    step_penalty: float = 0.0  # subtracted per turn (book: none for binary verifiers)
    flaky_prob: float = 0.0  # probability a test verdict flips
    flaky_votes: int = 1  # majority vote over re-runs of candidate successes (1: off)
    truncation: str = "zero"  # out of turns: 0, as `arl eval` scores it ("score": Problem 13)
    max_turns: int = 6  # calls per episode
    zero_exploits: bool = True  # exploit detector: hardcoded submissions get reward 0
    # --- advantages (Problem 4)
    baseline: str = "loo"  # group baseline: loo (leave-one-out), mean, or none
    std_norm: bool = False  # divide by the group std (book: off for verifier rewards)
    # --- loss and optimizer (Problems 1, 2, 26)
    aggregation: str = "token_mean"  # token_mean | seq_mean_token_mean | constant (B x L_max)
    lr: float = 3e-4  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    grad_clip: float = 1.0  # max global grad norm (0: off)
    epochs: int = 1  # passes over each batch of rollouts
    minibatches: int = 4  # optimizer steps per pass (episodes split evenly; PPO-style)
    microbatch_size: int = 0  # episodes per backward pass, accumulated (0: whole minibatch)
    clip: bool = True  # PPO ratio clipping of pi / pi_prox
    clip_low: float = 0.2  # ratio floor 1 - clip_low
    clip_high: float = 0.28  # ratio ceiling 1 + clip_high (clip-higher: above clip_low)
    # --- KL to a reference (Problems 5, 6)
    kl: str = "off"  # off | k1 | k2 | k3 (book: off or small for verifier rewards)
    kl_in: str = "loss"  # where the penalty goes: loss or reward
    kl_beta: float = 0.01  # KL coefficient
    ref_reset_every: int = 0  # reset the reference to the current policy every N steps (0: never)
    # --- entropy (Problem 26)
    entropy_coef: float = 0.0  # entropy bonus coefficient (start value with a target)
    target_entropy: float = 0.0  # nats per policy token; > 0 turns on the controller
    entropy_lr: float = 0.01  # controller step: coef += entropy_lr * (target - entropy)
    # --- task selection (Problem 3)
    dynamic_sampling: bool = False  # refill groups whose rewards are all equal with new tasks
    max_refills: int = 2  # refill rounds per step
    filter_cooldown: int = (
        5  # a task whose group was all-pass or all-fail sits out N steps (0: off)
    )
    # --- asynchronous sampling (Problem 16)
    staleness: int = 1  # k: rollouts come from weights k optimizer steps old (0: on-policy)
    is_correction: bool = True  # multiply each token by min(pi_prox / mu, is_cap)
    is_cap: float = 2.0  # C, the importance-weight cap
    # --- bookkeeping
    eval_every: int = 0  # evaluate train and held-out pass rates every N steps (0: off)
    eval_samples: int = 4  # episodes per task in each evaluation
    out: str = ""  # run directory: metrics.jsonl and checkpoints ("" : nothing written)
    save_every: int = 0  # checkpoint every N steps (0: only at the end); needs out
    keep_checkpoints: int = 2  # newest checkpoints kept on disk
    resume: bool = False  # continue from the newest checkpoint in out, if there is one
    mask_shift: int = 0  # Problem 28's bug, for its reproduction only: 1 aligns mask to ids

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise ArlError(f"{name}: {what}, got {getattr(self, name)!r}")

        for name, (lo, hi) in INT_RANGES.items():
            check(name, getattr(self, name), lo, hi, integer=True)
        check_seed("seed", self.seed)
        for name, (lo, hi) in FLOAT_RANGES.items():
            check(name, getattr(self, name), lo, hi)
        check("temperature", self.temperature, 0, MAX_FLOAT, open_lo=True)
        check("top_p", self.top_p, 0, 1, open_lo=True)
        check("lr", self.lr, 0, 1.0, open_lo=True)
        check("clip_low", self.clip_low, 0, 1, open_hi=True)
        need(self.split in SPLITS, "split", f"must be one of {', '.join(SPLITS)}")
        need(self.reward in REWARDS, "reward", f"must be one of {', '.join(REWARDS)}")
        need(self.truncation in TRUNCATIONS, "truncation", "must be zero or score")
        need(self.baseline in ("loo", "mean", "none"), "baseline", "must be loo, mean or none")
        need(self.aggregation in AGGREGATIONS, "aggregation", f"must be one of {AGGREGATIONS}")
        need(self.kl in ("off", *KL_ESTIMATORS), "kl", "must be off, k1, k2 or k3")
        need(self.kl_in in ("loss", "reward"), "kl_in", "must be loss or reward")
        need(self.flaky_votes % 2 == 1, "flaky_votes", "must be odd")
        need(self.mask_shift in (0, 1), "mask_shift", "must be 0 or 1")
        need(self.minibatches <= self.episodes_per_step, "minibatches", "must be <= episodes")
        need(
            self.episodes_per_step <= MAX_EPISODES_PER_STEP,
            "group_size",
            f"tasks_per_step x group_size must be <= {MAX_EPISODES_PER_STEP}",
        )
        need(not (self.resume and not self.out), "resume", "needs out")

    @property
    def episodes_per_step(self) -> int:
        return self.tasks_per_step * self.group_size

    @property
    def env_config(self) -> EnvConfig:
        return EnvConfig(
            reward=self.reward,
            mixed_alpha=self.mixed_alpha,
            step_penalty=self.step_penalty,
            flaky_prob=self.flaky_prob,
            flaky_votes=self.flaky_votes,
            truncation=self.truncation,
            max_turns=self.max_turns,
            zero_exploits=self.zero_exploits,
        )

    @property
    def l_max(self) -> int:
        """The policy-token budget of an episode: the constant normalizer's L_max."""
        return self.max_turns * self.env_config.max_call_tokens

    @property
    def updates_per_step(self) -> int:
        return self.epochs * self.minibatches


def minimal_reinforce(**overrides) -> PGConfig:
    """Chapter 15's minimal REINFORCE: G=8 on 8 tasks, r - mean(group), no clipping, one
    on-policy update per batch, no filtering and no importance weight."""
    base = dict(baseline="mean", clip=False, epochs=1, minibatches=1, staleness=0,
                is_correction=False, filter_cooldown=0, dynamic_sampling=False)  # fmt: skip
    return PGConfig(**{**base, **overrides})


def parse_overrides(pairs: Sequence[str], base: dict | None = None) -> dict[str, Any]:
    """`key=value` strings -> typed PGConfig fields; an unknown key or bad value names the field."""
    types = {f.name: f.type for f in fields(PGConfig)}
    out = dict(base or {})
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep:
            raise ArlError(f"--set {pair!r}: expected key=value")
        if key not in types:
            raise ArlError(f"{key}: unknown PGConfig field (see examples/pg.json)")
        out[key] = _coerce(key, types[key], text.strip())
    return out


def _coerce(key: str, type_name: Any, text: str) -> Any:
    name = type_name if isinstance(type_name, str) else type_name.__name__
    try:
        if name == "bool":
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if name == "int":
            return int(text)
        if name == "float":
            return float(text)
    except ValueError:
        raise ArlError(f"{key}: expected {_KIND[name]}, got {text!r}") from None
    return text


_KIND = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def make_config(values: dict[str, Any]) -> PGConfig:
    """A PGConfig from a dict (a JSON file or parsed --set pairs); names any bad field."""
    known = {f.name: f for f in fields(PGConfig)}
    for key, value in values.items():
        if key not in known:
            raise ArlError(f"{key}: unknown PGConfig field (see examples/pg.json)")
        want = known[key].type
        want = want if isinstance(want, str) else want.__name__
        ok = {
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "bool": lambda v: isinstance(v, bool),
            "str": lambda v: isinstance(v, str),
        }[want]
        if not ok(value):
            raise ArlError(f"{key}: expected {_KIND[want]}, got {value!r}")
    return PGConfig(**values)


# --- rollouts and rewards -----------------------------------------------------------------------


def sample_groups(
    sampler: TinyAgent, tasks: Sequence[Task], config: PGConfig, seed: int
) -> list[list[Trajectory]]:
    """G episodes of each task in one batched rollout; returns one group per task."""
    G = config.group_size
    jobs = [t for t in tasks for _ in range(G)]
    trajs = rollout_batch(
        sampler,
        jobs,
        seed=seed,
        env_config=config.env_config,
        temperature=config.temperature,
        top_p=config.top_p,
    )
    return [trajs[i * G : (i + 1) * G] for i in range(len(tasks))]


def group_rewards(groups: Sequence[Sequence[Trajectory]]) -> torch.Tensor:
    return torch.tensor([[t.reward for t in g] for g in groups], dtype=torch.float)  # (N, G)


def advantages(rewards_NG: torch.Tensor, config: PGConfig) -> torch.Tensor:
    """Group-relative advantages (N, G)."""
    return torch.stack([group_advantages(r, config.baseline, config.std_norm) for r in rewards_NG])


def shifted_mask(batch: Batch) -> Batch:
    """Problem 28's bug: the mask aligned to ids[:, :-1] instead of the targets."""
    from dataclasses import replace

    inputs_owner = torch.cat([torch.full_like(batch.owners[:, :1], -1), batch.owners[:, :-1]], 1)
    return replace(batch, action_mask=(inputs_owner == POLICY).float())


def rows(batch: Batch, idx: torch.Tensor) -> Batch:
    """The sub-batch of rows idx (B', T)."""
    return Batch(*(getattr(batch, f)[idx] for f in batch.__dataclass_fields__))


# --- one optimizer step: microbatch accumulation under a global normalizer ---------------------


def accumulate_policy_gradient(
    model: TinyAgent,
    batch: Batch,
    adv_B: torch.Tensor,
    config: PGConfig,
    prox_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    microbatch_size: int | None = None,
    per_microbatch_mean: bool = False,
) -> dict[str, float]:
    """Backward the PG loss of `batch` in microbatches; grads add up to the one-batch gradient.

    The normalizers (tokens, episodes) are counted over the whole batch before the first
    backward pass (Problem 2). prox_logp (B, T) is pi_prox; None means "the current
    weights" (a single update per batch, where pi_prox = pi_theta before the step).
    per_microbatch_mean=True is Problem 2's bug: each microbatch normalized by its own
    counts and the losses averaged, kept only to measure the difference.
    """
    B = batch.input_ids.size(0)
    n_tokens = float(batch.action_mask.sum())
    micro = microbatch_size if microbatch_size is not None else config.microbatch_size
    micro = micro or B
    sums = {"loss": 0.0, "ent": 0.0, "clip": 0.0, "cap": 0.0, "ref_k3": 0.0, "mu_k3": 0.0}
    ref_abs: list[torch.Tensor] = []
    mu_abs: list[torch.Tensor] = []
    splits = torch.arange(B).split(micro)
    for idx in splits:
        mb = rows(batch, idx)
        mask = mb.action_mask  # (b, T)
        logp, ent = policy_logprobs(model, mb, config.temperature)  # (b, T), (b, T)
        prox = logp.detach() if prox_logp is None else prox_logp[idx]
        adv = adv_B[idx][:, None].expand_as(logp)  # (b, T): each token gets its episode's A
        if config.clip:
            tok, clipped = clipped_surrogate(logp, prox, adv, config.clip_low, config.clip_high)
        else:
            tok, clipped = -torch.exp(logp - prox) * adv, torch.zeros_like(mask, dtype=torch.bool)
        w_is, capped = truncated_is_weights(prox, mb.old_logp, config.is_cap)
        if config.is_correction:
            tok = w_is * tok
        if ref_logp is not None and config.kl_in == "loss":
            tok = tok + config.kl_beta * kl_to_reference(logp, ref_logp[idx], config.kl)
        if entropy_coef:
            tok = tok - entropy_coef * ent
        w = loss_weights(mask, config.aggregation, B, n_tokens, config.l_max)  # (b, T)
        if per_microbatch_mean:
            b_mb = len(idx)
            w = loss_weights(mask, config.aggregation, b_mb, mask.sum(), config.l_max) / len(splits)
        loss = (w * tok).sum()
        loss.backward()
        on = mask.bool()
        sums["loss"] += float(loss.detach())
        sums["ent"] += float(ent.detach()[on].sum())
        sums["clip"] += float(clipped[on].sum())
        sums["cap"] += float(capped[on].sum())
        mu_lr = (mb.old_logp - prox)[on]  # log mu - log pi_prox: KL(mu || pi_prox) samples
        sums["mu_k3"] += float(kl_k3(-mu_lr).sum())
        mu_abs.append(mu_lr.abs())
        if ref_logp is not None:
            lr_ref = (ref_logp[idx] - logp.detach())[on]
            sums["ref_k3"] += float(kl_k3(lr_ref).sum())
            ref_abs.append(lr_ref.abs())
    n = max(n_tokens, 1.0)
    out = {
        "loss": sums["loss"],
        "entropy": sums["ent"] / n,
        "clip_frac": sums["clip"] / n,
        "capped_frac": sums["cap"] / n,
        "kl/mu_k3": sums["mu_k3"] / n,
        "kl/mu_absq99": _quantile(mu_abs, 0.99),
    }
    if ref_logp is not None:
        out |= {"kl/ref_k3": sums["ref_k3"] / n, "kl/ref_absq99": _quantile(ref_abs, 0.99)}
    return out


def _quantile(parts: list[torch.Tensor], q: float) -> float:
    x = torch.cat(parts) if parts else torch.zeros(0)
    return float(torch.quantile(x, q)) if x.numel() else 0.0


@torch.no_grad()
def batch_logprobs(model: TinyAgent, batch: Batch, temperature: float) -> torch.Tensor:
    was = model.training
    model.eval()
    logp, _ = policy_logprobs(model, batch, temperature)
    model.train(was)
    return logp  # (B, T)


# --- metrics ------------------------------------------------------------------------------------


def _pct(values: list[int], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def rollout_metrics(trajs: Sequence[Trajectory], config: PGConfig) -> dict[str, Any]:
    """What a dashboard shows about one step's episodes (Problems 7, 12, 13, 27)."""
    outs = [t.outcome for t in trajs]
    hidden = float(np.mean([o.hidden_pass for o in outs]))
    public = float(np.mean([o.public_pass for o in outs]))
    scored = lambda o: o.submitted or config.truncation == "score"  # noqa: E731
    succ = [t.n_action_tokens for t in trajs if t.passed]
    fail = [t.n_action_tokens for t in trajs if not t.passed]
    return {
        "reward": float(np.mean([t.reward for t in trajs])),
        "pass_rate": hidden,
        "public_pass_rate": public,
        "public_hidden_gap": public - hidden,
        "hack_rate": float(np.mean([o.hacked for o in outs])),
        "hacks_caught": int(sum(o.hacked and scored(o) and config.zero_exploits for o in outs)),
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
    }


# --- checkpoints: model dir loadable by arl eval, plus trainer_state.pt; atomic ------------------

STATE_FILE = "trainer_state.pt"


def checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints under a run directory, oldest first."""
    done = [p for p in out.glob("ckpt-*") if re.fullmatch(r"ckpt-\d+", p.name)]
    return sorted((p for p in done if (p / STATE_FILE).is_file()), key=lambda p: int(p.name[5:]))


def save_trainer_checkpoint(out: Path, step: int, model: TinyAgent, state: dict, keep: int) -> Path:
    """Write out/ckpt-STEP via a temp directory and one rename; keep the newest `keep`.

    The trainer state's sha256 goes into the checkpoint's config.json beside the tensors'
    checksums; a failed write removes its temp directory and leaves the older checkpoints.
    """
    final = out / f"ckpt-{step:06d}"
    tmp = out / f"{TMP_PREFIX}ckpt-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        buf = io.BytesIO()
        torch.save(state, buf)
        data = buf.getvalue()
        atomic_write_bytes(tmp / STATE_FILE, data)
        files = {STATE_FILE: hashlib.sha256(data).hexdigest()}
        save_checkpoint(model, tmp, extra={"kind": "pg", "step": step, "files": files})
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)  # atomic: a crash before this line leaves the last good checkpoint
        fsync_dir(out)
    except OSError as e:
        raise ArlError(f"cannot write checkpoint {final}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_trainer_state(ckpt: Path) -> dict:
    """A checkpoint's trainer_state.pt, checked against the sha256 its config.json holds."""
    meta = read_meta(ckpt)
    want = (
        (meta.get("files") or {}).get(STATE_FILE) if isinstance(meta.get("files"), dict) else None
    )
    try:
        data = (ckpt / STATE_FILE).read_bytes()
    except OSError as e:
        raise ArlError(f"checkpoint {ckpt}: cannot read {STATE_FILE} ({e.strerror})") from None
    if want is None or hashlib.sha256(data).hexdigest() != want:
        raise ArlError(f"checkpoint {ckpt}: corrupt {STATE_FILE} (checksum differs)")
    try:
        state = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # torch raises many types for a damaged file  # noqa: BLE001
        raise ArlError(f"checkpoint {ckpt}: corrupt {STATE_FILE} ({type(e).__name__})") from None
    if not isinstance(state, dict) or not _STATE_KEYS <= set(state):
        raise ArlError(f"checkpoint {ckpt}: corrupt {STATE_FILE} (missing fields)")
    return state


_STATE_KEYS = {"step", "optimizer", "python_rng", "torch_rng", "reference", "queue", "cooldown",
               "entropy_coef", "config"}  # fmt: skip
ALWAYS_CHANGEABLE = ("resume", "out")  # resuming, or a run folder that was moved


def config_changes(saved: dict, config: PGConfig) -> dict[str, tuple[Any, Any]]:
    """Fields whose value differs between a checkpoint's PGConfig and this run's."""
    now = asdict(config)
    return {
        k: (saved.get(k), now.get(k))
        for k in sorted(saved.keys() | now.keys())
        if saved.get(k) != now.get(k) and k not in ALWAYS_CHANGEABLE
    }


def resume_state(ckpt: Path, model: TinyAgent, config: PGConfig, allow_change) -> dict:
    """Load the newest checkpoint into `model` and return its trainer state, after checking
    that the model's shape and the PGConfig match it (keys in `allow_change` may differ)."""
    loaded = load_checkpoint(ckpt)  # checksums, format, finiteness
    if loaded.config != model.config:
        a, b = asdict(loaded.config), asdict(model.config)
        diff = ", ".join(f"{k} {a[k]} vs {b[k]}" for k in a if a[k] != b[k])
        raise ArlError(f"resume: {ckpt} holds another model shape than --init ({diff})")
    st = load_trainer_state(ckpt)
    try:
        saved = json.loads(st["config"])
    except (TypeError, ValueError):
        raise ArlError(f"checkpoint {ckpt}: corrupt {STATE_FILE} (config)") from None
    changes = {k: v for k, v in config_changes(saved, config).items() if k not in allow_change}
    if changes:
        shown = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in list(changes.items())[:3])
        raise ArlError(
            f"resume: the config differs from {ckpt}'s ({shown}); "
            f"--allow-change {','.join(changes)} accepts it"
        )
    tensors = [t for v in st["optimizer"].get("state", {}).values() for t in v.values()]
    if nonfinite_tensor({str(i): t for i, t in enumerate(tensors) if torch.is_tensor(t)}):
        raise ArlError(f"resume: {ckpt}: non-finite optimizer state")
    model.load_state_dict(loaded.state_dict())
    return st


def _snapshot(model: TinyAgent) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --- the loop -----------------------------------------------------------------------------------


OWNED = ("ckpt-*", "metrics.jsonl", "config.json", *SINK_OWNED)  # what a run writes in its folder


def train_pg(
    model: TinyAgent,
    config: PGConfig = PGConfig(),
    tasks: Sequence[Task] | None = None,
    steps: int | None = None,
    hook: Hook | None = None,
    hook_every: int = 10,
    progress: bool = False,
    allow_change: Sequence[str] = (),
    claimed: bool = False,
    sink: Sink | None = None,
) -> list[dict]:
    """Train `model` in place on `tasks` (default: config.split); one metrics dict per step.

    hook(step, model) runs at step 0, every `hook_every` steps and after the last; what it
    returns is logged. With config.out, metrics go to out/metrics.jsonl and checkpoints
    to out/ckpt-STEP (each loadable by arl.model.load_checkpoint); the folder is claimed
    (locked; another run's files refused) unless the caller `claimed` it already. A resume
    refuses a PGConfig that differs from the checkpoint's outside `allow_change`. A NaN or
    infinite loss or gradient norm stops the run (Diverged) before the optimizer steps.
    A `sink` (arl.logging_bridge) gets every logged record's scalars too; its owner closes it.
    """
    if not config.out or claimed:
        return _train_pg(model, config, tasks, steps, hook, hook_every, progress, allow_change,
                         sink)  # fmt: skip
    with claim_output_dir(config.out, "train pg", OWNED, reuse=config.resume):
        return _train_pg(model, config, tasks, steps, hook, hook_every, progress, allow_change,
                         sink)  # fmt: skip


def _kept_metrics(path: Path, start: int, config: PGConfig, steps: int) -> list[dict]:
    """The log rows a resume from step `start` keeps: those an uninterrupted run has too.

    An evaluation logged at `start` only because it was the old last step is dropped.
    """
    if not start or not path.exists():
        return []
    rows = [r for r in read_jsonl(path) if isinstance(r.get("step"), int) and r["step"] <= start]
    regular = config.eval_every and start % config.eval_every == 0
    return [r for r in rows if r["step"] < start or "reward" in r or regular or start == steps]


def _train_pg(model, config, tasks, steps, hook, hook_every, progress, allow_change, sink=None):
    pool = list(tasks) if tasks is not None else list(tasks_for(config.split))
    if not pool:
        raise ArlError("train_pg needs at least one task")
    steps = config.steps if steps is None else steps
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    rng = random.Random(config.seed)
    ref = copy.deepcopy(model).eval() if config.kl != "off" else None
    behavior = copy.deepcopy(model).eval() if config.staleness else None
    queue: deque[dict[str, torch.Tensor]] = deque()  # weights of the last k+1 steps
    cooldown: dict[str, int] = {}  # task -> first step it may be drawn again
    entropy_coef = config.entropy_coef
    start = 0
    out = Path(config.out) if config.out else None
    if out is not None and config.resume and checkpoints(out):
        ckpt = checkpoints(out)[-1]
        st = resume_state(ckpt, model, config, allow_change)
        try:
            opt.load_state_dict(st["optimizer"])
            rng.setstate(_to_rng_state(st["python_rng"]))
            torch.set_rng_state(st["torch_rng"])
            if ref is not None:
                ref.load_state_dict(st["reference"])
        except (ValueError, TypeError, KeyError, RuntimeError) as e:
            raise ArlError(f"resume: {ckpt}: trainer state does not fit this run ({e})") from None
        queue = deque(st["queue"])
        cooldown, entropy_coef, start = dict(st["cooldown"]), float(st["entropy_coef"]), st["step"]
    jsonl = None
    if out is not None:
        atomic_write_json(out / "config.json", asdict(config))
        path = out / "metrics.jsonl"
        keep = _kept_metrics(path, start, config, steps)
        atomic_write_text(path, "".join(dumps_finite(r) + "\n" for r in keep))
        jsonl = path.open("a", encoding="utf-8")
    bar = _progress(progress, steps, start)
    try:
        return _loop(model, config, pool, steps, hook, hook_every, bar, opt, rng, ref,
                     behavior, queue, cooldown, entropy_coef, start, out, jsonl, sink)  # fmt: skip
    except Diverged as e:
        done = checkpoints(out) if out is not None else []
        last = f"; last good checkpoint: {done[-1]}" if done else ""
        raise Diverged(f"{e}{last}") from None
    finally:
        bar(None, None)
        if jsonl is not None:
            jsonl.close()


def _loop(model, config, pool, steps, hook, hook_every, bar, opt, rng, ref, behavior,
          queue, cooldown, entropy_coef, start, out, jsonl, sink=None) -> list[dict]:  # fmt: skip
    """The training steps of _train_pg, from `start` + 1 to `steps`."""
    history: list[dict] = []

    def log(record: dict) -> None:
        history.append(record)
        if jsonl is not None:
            append_jsonl(jsonl, record)
        if sink is not None:
            sink.log(record["step"], scalars(record))

    def run_hooks(step: int) -> None:
        record: dict[str, Any] = {}
        if config.eval_every and (step % config.eval_every == 0 or step == steps):
            record |= evaluate_splits(model, config)
        if hook is not None and (step % hook_every == 0 or step == steps):
            record |= hook(step, model) or {}
        if record:
            log({"step": step, **record})

    if start == 0:
        run_hooks(0)
    model.train()
    for step in range(start + 1, steps + 1):
        t0 = time.perf_counter()
        # 1. the sampler: the weights of k steps ago (simulated async sampling, Problem 16)
        sampler = model
        if config.staleness:
            queue.append(_snapshot(model))
            while len(queue) > config.staleness + 1:
                queue.popleft()
            behavior.load_state_dict(queue[0])
            sampler = behavior
        # 2. tasks, minus those whose last group was degenerate (pass-rate filtering)
        eligible = [t for t in pool if cooldown.get(t.name, 0) <= step]
        resting = [t for t in pool if cooldown.get(t.name, 0) > step]
        n = config.tasks_per_step
        if len(eligible) >= n:
            chosen = rng.sample(eligible, n)
        else:
            extra = rng.sample(resting, min(n - len(eligible), len(resting)))
            chosen = eligible + extra + rng.choices(pool, k=n - len(eligible) - len(extra))
        groups = sample_groups(sampler, chosen, config, rng.randrange(2**31))
        sampled = len(chosen) * config.group_size
        degenerate0 = degenerate_groups(group_rewards(groups))  # (N,)
        # 3. dynamic sampling: refill all-equal groups with groups of other tasks
        for _ in range(config.max_refills if config.dynamic_sampling else 0):
            bad = degenerate_groups(group_rewards(groups)).nonzero().flatten().tolist()
            if not bad:
                break
            used = {t.name for t in chosen}
            fresh = [t for t in pool if t.name not in used] or pool
            new_tasks = (
                rng.sample(fresh, len(bad))
                if len(fresh) >= len(bad)
                else [rng.choice(fresh) for _ in bad]
            )
            new = sample_groups(sampler, new_tasks, config, rng.randrange(2**31))
            sampled += len(new_tasks) * config.group_size
            for j, i in enumerate(bad):
                if not degenerate_groups(group_rewards([new[j]]))[0]:
                    groups[i], chosen[i] = new[j], new_tasks[j]
        if config.filter_cooldown:
            for t, d in zip(chosen, degenerate_groups(group_rewards(groups)).tolist(), strict=True):
                if d:
                    cooldown[t.name] = step + 1 + config.filter_cooldown
        trajs = [t for g in groups for t in g]
        t1 = time.perf_counter()
        # 4. advantages (with the KL penalty folded into the reward, if asked)
        batch = collate(trajs, check=config.mask_shift == 0)
        if config.mask_shift:
            batch = shifted_mask(batch)
        need_prox = config.updates_per_step > 1 or (ref is not None and config.kl_in == "reward")
        prox = batch_logprobs(model, batch, config.temperature) if need_prox else None
        ref_logp = batch_logprobs(ref, batch, config.temperature) if ref is not None else None
        rewards_NG = group_rewards(groups)
        if ref is not None and config.kl_in == "reward":
            kl_B = (kl_to_reference(prox, ref_logp, config.kl) * batch.action_mask).sum(1)
            rewards_NG = rewards_NG - config.kl_beta * kl_B.view_as(rewards_NG)
        adv_NG = advantages(rewards_NG, config)
        adv_B = adv_NG.flatten()  # (B,)
        # 5. epochs x minibatches optimizer steps
        stats: list[dict[str, float]] = []
        grad_norms: list[float] = []
        B = adv_B.numel()
        for _ in range(config.epochs):
            order = list(range(B))
            if config.minibatches > 1:
                rng.shuffle(order)
            for chunk in torch.tensor(order).tensor_split(config.minibatches):
                opt.zero_grad(set_to_none=True)
                stats.append(
                    accumulate_policy_gradient(
                        model,
                        rows(batch, chunk),
                        adv_B[chunk],
                        config,
                        None if prox is None else prox[chunk],
                        None if ref_logp is None else ref_logp[chunk],
                        entropy_coef,
                    )
                )
                params = [p for p in model.parameters() if p.grad is not None]
                norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip or float("inf"))
                grad_norms.append(float(norm))
                if not (math.isfinite(stats[-1]["loss"]) and math.isfinite(grad_norms[-1])):
                    raise Diverged(
                        f"step {step}: loss {stats[-1]['loss']:g}, gradient norm "
                        f"{grad_norms[-1]:g}; stopped before the optimizer step"
                    )
                opt.step()
        # the first pass covers every episode once, against the fixed pi_prox
        first = {k: float(np.mean([s[k] for s in stats[: config.minibatches]])) for k in stats[0]}
        if config.target_entropy:
            entropy_coef = entropy_controller(
                entropy_coef, first["entropy"], config.target_entropy, config.entropy_lr
            )
        if ref is not None and config.ref_reset_every and step % config.ref_reset_every == 0:
            ref.load_state_dict(model.state_dict())
        t2 = time.perf_counter()
        nonzero = {chosen[i].name for i in range(len(groups)) if bool(adv_NG[i].abs().max() > 0)}
        record = {
            "step": step,
            **rollout_metrics(trajs, config),
            "entropy": first["entropy"],
            "degenerate_frac": float(degenerate0.float().mean()),
            "degenerate_frac_final": float(degenerate_groups(group_rewards(groups)).float().mean()),
            "tasks_with_grad": len(nonzero),
            "episodes_sampled": sampled,
            "clip_frac": float(np.mean([s["clip_frac"] for s in stats])),
            "capped_frac": first["capped_frac"],
            "kl/mu_k3": first["kl/mu_k3"],
            "kl/mu_absq99": first["kl/mu_absq99"],
            **{k: first[k] for k in ("kl/ref_k3", "kl/ref_absq99") if k in first},
            "grad_norm": float(np.mean(grad_norms)),
            "loss": float(np.mean([s["loss"] for s in stats])),
            "entropy_coef": entropy_coef,
            "time/sample": t1 - t0,
            "time/train": t2 - t1,
            "time/step": t2 - t0,
        }
        log(record)
        bar(step, record)
        run_hooks(step)
        if out is not None and (
            step == steps or (config.save_every and step % config.save_every == 0)
        ):
            state = {
                "step": step,
                "optimizer": opt.state_dict(),
                "python_rng": _from_rng_state(rng.getstate()),
                "torch_rng": torch.get_rng_state(),
                "reference": ref.state_dict() if ref is not None else {},
                "queue": list(queue),
                "cooldown": cooldown,
                "entropy_coef": entropy_coef,
                "config": json.dumps(asdict(config)),
            }
            save_trainer_checkpoint(out, step, model, state, config.keep_checkpoints)
    return history


def _from_rng_state(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _to_rng_state(saved: list) -> tuple:
    version, internal, gauss = saved
    return (version, tuple(internal), gauss)


def evaluate_splits(model: TinyAgent, config: PGConfig) -> dict[str, float]:
    """Hidden-test pass rate on the train and held-out splits (same seed every time)."""
    from arl.eval.metrics import run_policy

    out = {}
    for split in SPLITS:
        trajs = run_policy(
            model,
            tasks_for(split),
            samples=config.eval_samples,
            seed=config.seed + 10_007,
            env_config=EnvConfig(max_turns=config.max_turns),
        )
        out[f"eval/{split}_pass"] = float(np.mean([t.passed for t in trajs]))
    return out


def _progress(enabled: bool, steps: int, start: int) -> Callable[[int | None, dict | None], None]:
    """A rich progress bar fed one record per step; a no-op when disabled."""
    if not enabled:
        return lambda step, record: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("pg"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    bar.start()
    task = bar.add_task("", total=steps, completed=start)

    def update(step: int | None, r: dict | None) -> None:
        if step is None:
            bar.stop()
            return
        desc = (
            f"reward {r['reward']:.2f} pass {r['pass_rate']:.2f} gap {r['public_hidden_gap']:+.2f} "
            f"H {r['entropy']:.2f} degen {r['degenerate_frac']:.2f} clip {r['clip_frac']:.2f} "
            f"cap {r['capped_frac']:.2f} |g| {r['grad_norm']:.2f}"
        )
        bar.update(task, completed=step, description=desc)

    return update


def is_finite_history(history: Sequence[dict]) -> bool:
    """True if every float metric is finite (a cheap divergence guard for tests)."""
    return all(math.isfinite(v) for r in history for v in r.values() if isinstance(v, float))
