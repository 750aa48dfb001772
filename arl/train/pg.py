"""Policy gradient on any environment (Chapter 9 and Appendix B), one loop with every knob.

`train_pg` reads top to bottom: set up (loop state, tasks, run folder, rollouts), then each
step draws G episodes of each task with the sampler's weights (k steps old under simulated
async sampling; pg_groups.py), scores them (frozen passes, group advantages, a teacher's
per-token ones), updates (`epochs x minibatches` optimizer steps on config.loss's token loss,
pg_losses.LOSSES: by default PPO's clipped, importance-weighted surrogate; accumulating
microbatch gradients under a normalizer counted before any backward pass), logs, evaluates and
checkpoints; then closes.
The data source is the groups of on-policy episodes; the weight is each token's advantage.
Config: pg_config.py; what is logged: pg_metrics.py; checkpoints: checkpoint/.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from arl.batch import Batch, collate
from arl.env import SPLITS, Task, get_environment
from arl.errors import ArlError, Diverged
from arl.logging_bridge import OWNED as SINK_OWNED
from arl.logging_bridge import Sink
from arl.losses import (
    entropy_controller,
    group_advantages,
    kl_k3,
    kl_to_reference,
    loss_weights,
    token_logprobs,
)
from arl.model import TinyAgent
from arl.rollout import renderer_of
from arl.runio import claim_output_dir
from arl.train import checkpoint, distill
from arl.train.checkpoint import LoopState
from arl.train.common import (
    Hook,
    frozen_logprobs,
    hook_due,
    make_optimizer,
    optimizer_step,
    reference_of,
)
from arl.train.pg_config import PGConfig
from arl.train.pg_groups import Drawn, Rollouts, group_rewards
from arl.train.pg_losses import LOSSES, LossInputs, kl_part
from arl.train.pg_metrics import (
    RunLog,
    evaluate_tasks,
    grad_parts,
    mismatch_stats,
    quantile,
    rollout_metrics,
    update_metrics,
)
from arl.train.samples import sample_due, step_samples
from arl.types import Trajectory

# the only non-deterministic metrics (time/ref: with a KL reference)
TIMING_KEYS = ("time/sample", "time/train", "time/step", "time/ref")
# what a run writes in its folder
OWNED = ("ckpt-*", "metrics.jsonl", "samples.jsonl", "config.json", *SINK_OWNED)
Collate = Callable[[Sequence[Trajectory]], Batch]  # trajectories -> the batch the loss sees
# (mask_bT, config, episodes in the step, action tokens in the step, microbatches) -> (b, T)
TokenWeights = Callable[[torch.Tensor, PGConfig, int, float, int], torch.Tensor]


# --- the weight: each episode's group advantage ---------------------------------------------


def graded_mask(groups: Sequence[Sequence[Trajectory]]) -> torch.Tensor:
    """(N, G) bool: the episodes the grader scored (an infrastructure failure is no reward)."""
    return torch.tensor([[not t.outcome.infra_error for t in g] for g in groups])


def advantages(
    rewards_NG: torch.Tensor, config: PGConfig, graded_NG: torch.Tensor | None = None
) -> torch.Tensor:
    """Group-relative advantages (N, G); an ungraded episode gets 0 and is left out of its
    group's baseline (the group is the graded episodes)."""
    rows = []
    for n, r in enumerate(rewards_NG):
        ok = graded_NG[n] if graded_NG is not None else None
        if ok is None or bool(ok.all()):
            rows.append(group_advantages(r, config.baseline, config.std_norm))
            continue
        adv = torch.zeros_like(r)
        if bool(ok.any()):
            adv[ok] = group_advantages(r[ok], config.baseline, config.std_norm)
        rows.append(adv)
    return torch.stack(rows)


# --- the weight: each token's advantage under the chosen loss, accumulated over microbatches ----


def step_weights(mask_bT, config: PGConfig, n_seqs: int, n_tokens: float, n_micro: int):
    """Per-token weights of one microbatch, normalized by the whole step's counts (Problem 2)."""
    return loss_weights(mask_bT, config.aggregation, n_seqs, n_tokens, config.l_max)


def rows(batch: Batch, idx: torch.Tensor) -> Batch:
    """The sub-batch of rows idx (B', T)."""
    return Batch(*(getattr(batch, f)[idx] for f in batch.__dataclass_fields__))


def accumulate_policy_gradient(
    model: TinyAgent,
    batch: Batch,
    adv_B: torch.Tensor,
    config: PGConfig,
    prox_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    microbatch_size: int | None = None,
    weights: TokenWeights = step_weights,
    kl_grad: bool = False,
) -> dict[str, float]:
    """Backward the PG loss of `batch` in microbatches; grads add up to the one-batch gradient.

    The normalizers (tokens, episodes) are counted over the whole batch before the first
    backward pass (Problem 2). prox_logp (B, T) is pi_prox; None means "the current
    weights" (a single update per batch, where pi_prox = pi_theta before the step).
    kl_grad (with a KL in the loss): also the KL term's gradient apart (one more backward
    pass per microbatch), to log its norm against the rest's, the policy gradient's
    (pg_metrics.grad_parts; Problem 6's measure of a binding penalty).
    """
    B = batch.input_ids.size(0)
    n_tokens = float(batch.action_mask.sum())
    micro = config.microbatch_size if microbatch_size is None else microbatch_size
    splits = torch.arange(B).split(micro or B)
    loss_fn = LOSSES[config.loss]
    sums = {"loss": 0.0, "ent": 0.0, "ref_k3": 0.0, "mu_k3": 0.0}
    own = dict.fromkeys(loss_fn.stats, 0.0)  # the loss's statistics, summed over policy tokens
    ref_abs: list[torch.Tensor] = []
    mu_abs: list[torch.Tensor] = []
    split = kl_grad and ref_logp is not None and config.kl_in == "loss"
    params = [p for p in model.parameters() if p.requires_grad]
    if split:  # the gradient already there (none within optimizer_step), and the KL term's
        before = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]
        g_kl = [torch.zeros_like(p) for p in params]
    for idx in splits:
        mb = rows(batch, idx)
        on = mb.action_mask.bool()  # (b, T)
        w = weights(mb.action_mask, config, B, n_tokens, len(splits))  # (b, T) step-normalized
        logp, ent = token_logprobs(model, mb, True, config.temperature)  # (b, T), (b, T)
        prox = logp.detach() if prox_logp is None else prox_logp[idx]
        ref = ref_logp[idx] if ref_logp is not None else None
        inputs = LossInputs(
            logp=logp,
            prox_logp=prox,
            mu_logp=mb.old_logp,
            adv=adv_B[idx],
            mask=mb.action_mask,
            weights=w,
            entropy=ent,
            entropy_coef=entropy_coef,
            ref_logp=ref if config.kl_in == "loss" else None,
        )
        loss, stats = loss_fn.fn(inputs, config)
        if split:
            part = torch.autograd.grad(
                kl_part(inputs, config), params, retain_graph=True, allow_unused=True
            )
            for acc, g in zip(g_kl, part, strict=True):
                if g is not None:
                    acc += g
        loss.backward()
        sums["loss"] += float(loss.detach())
        sums["ent"] += float(ent.detach()[on].sum())
        for k in loss_fn.stats:
            own[k] += stats[k]
        mu_lr = (mb.old_logp - prox)[on]  # log mu - log pi_prox: KL(mu || pi_prox) samples
        sums["mu_k3"] += float(kl_k3(-mu_lr).sum())
        mu_abs.append(mu_lr.abs())
        if ref is not None:
            lr_ref = (ref - logp.detach())[on]
            sums["ref_k3"] += float(kl_k3(lr_ref).sum())
            ref_abs.append(lr_ref.abs())
    n = max(n_tokens, 1.0)
    out = {
        "loss": sums["loss"],
        "entropy": sums["ent"] / n,
        **{k: v / n for k, v in own.items()},  # per policy token (ppo: clip_frac, capped_frac)
        "kl/mu_k3": sums["mu_k3"] / n,
        "kl/mu_absq99": quantile(mu_abs, 0.99),
        **mismatch_stats(mu_abs),  # the same |log mu - log pi_prox|: mean, p99.9 (Problem 20)
    }
    if ref_logp is not None:
        out |= {"kl/ref_k3": sums["ref_k3"] / n, "kl/ref_absq99": quantile(ref_abs, 0.99)}
    if split:  # this call's gradient: what its backward passes added
        now = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        total = [g - b for g, b in zip(now, before, strict=True)]
        out |= grad_parts(total, g_kl)
    return out


# --- one step: draw the groups, score them, update on them ---------------------------------------


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """What every step of one run reads (the loop's state, which steps change, is LoopState)."""

    model: TinyAgent  # the policy, updated in place
    config: PGConfig  # the run's settings
    collate_fn: Collate  # trajectories -> the batch the loss sees
    rollouts: Rollouts  # where the groups are sampled: this process or Ray workers
    teacher: TinyAgent | None = None  # on-policy distillation's frozen teacher (arl.train.distill)
    kl_grad: bool = False  # split the KL term's gradient from the PG's, on each step's first update


@dataclass(frozen=True)
class Scored:
    """A step's batch and what the update weighs it by."""

    batch: Batch  # the step's episodes, collated (B, T)
    adv: torch.Tensor  # (B,) each episode's advantage, or (B, T) each token's (with a teacher)
    prox: torch.Tensor | None  # (B, T) pi_prox from a frozen pass (None: the update's own)
    ref_logp: torch.Tensor | None  # (B, T) the KL reference's log-probs (None: kl off)
    extra: dict[str, float]  # what scoring measured: the reference's forward time, the teacher's


def score(run: StepContext, s: LoopState, drawn: Drawn, step: int) -> Scored:
    """The drawn groups' advantages: the teacher's pass on their tasks (a monitor), the frozen
    passes (pi_prox, the KL reference), the rewards as group advantages (the KL in the reward
    where it goes there), then each token's teacher advantage."""
    model, config, groups = run.model, run.config, drawn.groups
    extra: dict[str, float] = {}
    taught = {}  # a monitor, not trained on: the teacher's own episode on each task
    if run.teacher is not None:
        seed = config.seed * 100_003 + step
        taught["teacher_pass_rate"] = distill.teacher_pass(run.teacher, drawn.chosen, config, seed)
    batch = run.collate_fn(drawn.episodes)
    prox = frozen_logprobs(model, batch, config.temperature) if config.prox_forward else None
    t_ref = time.perf_counter()
    ref_logp = frozen_logprobs(s.ref, batch, config.temperature) if s.ref is not None else None
    if s.ref is not None:  # the reference's forward, what dropping the KL saves (Problem 6)
        extra["time/ref"] = time.perf_counter() - t_ref
    rewards_NG = group_rewards(groups)
    if s.ref is not None and config.kl_in == "reward":  # the KL penalty folded into the reward
        kl_B = (kl_to_reference(prox, ref_logp, config.kl) * batch.action_mask).sum(1)
        rewards_NG = rewards_NG - config.kl_beta * kl_B.view_as(rewards_NG)
    adv_NG = advantages(rewards_NG, config, graded_mask(groups))
    adv = adv_NG.flatten()  # (B,) each episode's advantage
    if config.reward_weight != 1.0:
        adv = config.reward_weight * adv
    if run.teacher is not None:  # (B, T): each policy token's, with the teacher's added
        adv, by_teacher = distill.teacher_advantages(run.teacher, batch, adv_NG.flatten(), config)
        extra |= by_teacher | taught
    return Scored(batch, adv, prox, ref_logp, extra)


def minibatches(rng: random.Random, config: PGConfig, B: int) -> Iterator[torch.Tensor]:
    """The episodes (B',) of each of the epochs x minibatches updates: every epoch a new order
    (shuffled when it is split), cut into config.minibatches near-equal parts."""
    for _ in range(config.epochs):
        order = list(range(B))
        if config.minibatches > 1:
            rng.shuffle(order)
        yield from torch.tensor(order).tensor_split(config.minibatches)


def minibatch_backward(
    run: StepContext, s: LoopState, scored: Scored, idx, stats: list, kl_grad: bool = False
) -> float:
    """The accumulated backward passes of the episodes idx (B',), as optimizer_step runs them:
    their statistics appended to `stats`, their loss returned; kl_grad: with the KL term's
    gradient split from the policy gradient's (accumulate_policy_gradient)."""
    mb, adv = rows(scored.batch, idx), scored.adv[idx]
    prox, ref = (None if x is None else x[idx] for x in (scored.prox, scored.ref_logp))
    stats.append(
        accumulate_policy_gradient(
            run.model, mb, adv, run.config, prox, ref, s.entropy_coef, kl_grad=kl_grad
        )
    )
    return stats[-1]["loss"]


def update(run: StepContext, s: LoopState, scored: Scored, step: int) -> dict[str, float]:
    """epochs x minibatches checked optimizer steps on the scored batch; the update's metrics,
    with the learning rate the optimizer stepped with. With run.kl_grad the gradient is split
    on the step's first update (at pi_prox: one extra backward pass a step, not one an update)."""
    config, stats, norms = run.config, [], []
    lr = float(s.opt.param_groups[0]["lr"])
    for i, idx in enumerate(minibatches(s.rng, config, scored.adv.shape[0])):
        split = run.kl_grad and i == 0
        backward = partial(minibatch_backward, run, s, scored, idx, stats, split)
        _, norm = optimizer_step(run.model, s.opt, backward, config.grad_clip, f"step {step}")
        norms.append(norm)
    return update_metrics(stats, norms, config.minibatches, LOSSES[config.loss]) | {"lr": lr}


def pg_step(run: StepContext, s: LoopState, step: int) -> tuple[dict, list[Trajectory]]:
    """Draw (and describe what was drawn), score and update once; the step's metrics record,
    and the episodes it trained on."""
    model, config = run.model, run.config
    t0 = time.perf_counter()
    drawn = run.rollouts.draw(model, s, step)
    t1 = time.perf_counter()
    described = rollout_metrics(drawn.episodes, config)  # what was drawn
    scored = score(run, s, drawn, step)
    u = update(run, s, scored, step)
    if config.target_entropy:
        s.entropy_coef = entropy_controller(
            s.entropy_coef, u["entropy"], config.target_entropy, config.entropy_lr
        )
    if s.ref is not None and config.ref_reset_every and step % config.ref_reset_every == 0:
        s.ref.load_state_dict(model.state_dict())
    t2 = time.perf_counter()
    signal_N = scored.adv.abs().reshape(len(drawn.groups), -1).amax(1)  # (N,) largest |A|
    record = {
        "step": step,
        **described,
        "entropy": u.pop("entropy"),
        "degenerate_frac": drawn.degenerate_frac,
        "degenerate_frac_final": drawn.degenerate_frac_final,
        "tasks_with_grad": len({drawn.chosen[i].name for i, a in enumerate(signal_N) if a > 0}),
        "episodes_sampled": drawn.sampled,
        "train_tokens": int(scored.batch.lengths.sum()),  # positions the update reads (P29)
        **u,
        "entropy_coef": s.entropy_coef,
        **drawn.extra,
        **scored.extra,
        "time/sample": t1 - t0,
        "time/train": t2 - t1,
        "time/step": t2 - t0,
    }
    return record, drawn.episodes


# --- the run: set up, the loop, close -----------------------------------------------------------


def start_state(model: TinyAgent, config: PGConfig) -> LoopState:
    """A new run's loop state: the optimizer (plain AdamW: PG's logged runs were made with it),
    the run's random stream, the KL reference (a frozen copy of the start; None: kl off)."""
    return LoopState(
        make_optimizer(model, config.lr, config.weight_decay, fused=False),
        random.Random(config.seed),
        reference_of(model) if config.kl != "off" else None,  # LoRA: adapters off
        config.entropy_coef,
    )


def task_sets(
    config: PGConfig, tasks: Sequence[Task] | None
) -> tuple[list[Task], dict[str, Sequence[Task]]]:
    """The tasks trained on (`tasks`, else config.env's of config.split) and, with eval_every,
    those each split is evaluated on: the environment looked up once, for the whole run."""
    environment = get_environment(config.env.name)
    pool = list(tasks) if tasks is not None else list(environment.tasks(config.split))
    if not pool:
        raise ArlError("train_pg needs at least one task")
    splits = {split: environment.tasks(split) for split in SPLITS} if config.eval_every else {}
    return pool, splits


def train_pg(
    model: TinyAgent,
    config: PGConfig = PGConfig(),  # noqa: B008 (frozen)
    tasks: Sequence[Task] | None = None,
    steps: int | None = None,
    hook: Hook | None = None,
    hook_every: int = 10,
    progress: Callable[[dict], None] | None = None,
    allow_change: Sequence[str] = (),
    claimed: bool = False,
    sink: Sink | None = None,
    collate_fn: Collate = collate,
    teacher: TinyAgent | None = None,
    on_start: Callable[[], None] | None = None,
    kl_grad: bool = False,
) -> list[dict]:
    """Train `model` in place on `tasks` (default: config.env's of config.split); step metrics.

    hook(step, model) runs at step 0, every `hook_every` steps and after the last; what it
    returns is logged, with the evaluations of config.eval_every. progress(record) sees each
    step's record. With config.out, metrics go to out/metrics.jsonl (and to `sink`, which its
    owner closes) and checkpoints to out/ckpt-STEP; the folder is claimed unless the caller
    `claimed` it already. A resume refuses a PGConfig that differs from the checkpoint's
    outside `allow_change`. A NaN or infinite loss or gradient norm stops the run (Diverged)
    before the optimizer steps. collate_fn is a seam for the problems' deliberate bugs. With
    config.teacher_weight > 0, `teacher` (the loaded config.teacher) scores every sampled
    token: on-policy distillation (arl.train.distill). on_start() runs once every check
    passed (the teacher's, a resume's), before the first step: a caller's header line.
    kl_grad: each step also logs the KL term's gradient norm, the policy gradient's and their
    ratio (`kl/grad_ratio`), split on its first update (one more backward pass; Problem 6)."""
    if (teacher is not None) != bool(config.teacher_weight):
        raise ArlError("train_pg: a teacher needs teacher_weight > 0, and teacher_weight one")
    if teacher is not None:
        distill.check_teacher(teacher, model, config.teacher)
        teacher.eval()
    steps = config.steps if steps is None else steps
    s = start_state(model, config)
    if teacher is not None:  # recorded in every checkpoint; a resume refuses other weights
        s.teacher_sha256 = checkpoint.weights_sha256(teacher)
    pool, splits = task_sets(config, tasks)
    out = Path(config.out) if config.out else None
    own = out is not None and not claimed
    with claim_output_dir(out, "train pg", OWNED, reuse=config.resume) if own else nullcontext():
        if out is not None and config.resume:
            checkpoint.restore(out, model, s, config, allow_change)
        if on_start is not None:
            on_start()
        log = RunLog(out, config, s.step, steps, sink)
        renderer = renderer_of(model, environment=get_environment(config.env.name))
        run = StepContext(
            model=model,
            config=config,
            collate_fn=collate_fn,
            rollouts=Rollouts(model, config, pool),
            teacher=teacher,
            kl_grad=kl_grad,
        )
        model.train()
        try:
            for step in range(s.step + 1 if s.step else 0, steps + 1):  # step 0: the start
                if step:  # draw, score, update; log
                    s.step = step
                    record, episodes = pg_step(run, s, step)
                    log(record)
                    if out is not None and sample_due(step, config.eval_every, steps):
                        log.samples(step_samples(step, episodes, renderer))
                    if progress is not None:
                        progress(record)
                eval_due = hook_due(step, config.eval_every, steps)  # evaluate
                evaluated = evaluate_tasks(model, splits, config) if eval_due else {}
                if hook is not None and hook_due(step, hook_every, steps):
                    evaluated |= hook(step, model) or {}
                if evaluated:
                    log({"step": step, **evaluated})
                save_due = step == steps or hook_due(step, config.save_every, steps)
                if step and out is not None and save_due:  # checkpoint
                    checkpoint.save(out, model, s, config)
        except Diverged as e:
            raise Diverged(f"{e}{checkpoint.last_good(out)}") from None
        finally:
            log.close()
            run.rollouts.close()
        return log.history
