"""On-policy distillation (Problem 29): the student samples, a frozen teacher scores every
token the student sampled, and sg[log pi_teacher - log pi_student] is that token's advantage
under PG's importance-sampled, clipped token loss (arl.train.pg with a teacher).

Here: the teacher's check (one tokenizer and vocabulary, context enough for the student's
episodes), its per-token advantage beside the environment's group advantage, and the step's
teacher metrics. tinker-cookbook's `distillation/train_on_policy.py` and NeMo-RL's
`adv_estimator: opd` are the same recipe; TRL's GKD mixes in the teacher's own samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from arl.batch import Batch
from arl.env import Task
from arl.errors import ArlError
from arl.losses import distill_advantages
from arl.rollout import rollout_batch
from arl.train.common import frozen_logprobs
from arl.train.pg_config import PGConfig
from arl.train.pg_metrics import quantile

# `arl train distill`'s defaults over PGConfig's: the teacher alone (tinker's zero reward),
# every task trained on (an all-pass or all-fail group still has the teacher's signal), and
# lr 1e-4: from the weak base 3e-4 and 1e-3 collapse within 10 steps (Problem 29's sweep)
DISTILL_DEFAULTS = {"teacher_weight": 1.0, "reward_weight": 0.0, "filter_cooldown": 0, "lr": 1e-4}


def vocabulary(policy) -> dict[str, int] | None:
    """A real model's token -> id map (None for TinyAgent, whose ids are the environment's)."""
    renderer = getattr(policy, "renderer", None)
    return renderer.tokenizer.get_vocab() if renderer is not None else None


def check_teacher(teacher, student, name: str) -> None:
    """Refuse, in one line, a teacher whose ids mean other tokens than the student's: another
    kind of model, another tokenizer or vocabulary size, or too short a context."""
    t_vocab, s_vocab = vocabulary(teacher), vocabulary(student)
    if (t_vocab is None) != (s_vocab is None):
        kinds = {True: "TinyAgent", False: "a transformers model"}
        raise ArlError(
            f"teacher {name}: {kinds[t_vocab is None]} cannot teach {kinds[s_vocab is None]} "
            "(distillation needs the student's tokenizer: --teacher CKPT for --init, "
            "--teacher-model PATH for --model)"
        )
    if t_vocab != s_vocab:
        raise ArlError(f"teacher {name}: its tokenizer is not the student's (another vocabulary)")
    if teacher.config.vocab_size != student.config.vocab_size:
        raise ArlError(
            f"teacher {name}: vocabulary size {teacher.config.vocab_size} is not the student's "
            f"{student.config.vocab_size}"
        )
    if teacher.config.block_size < student.config.block_size:
        raise ArlError(
            f"teacher {name}: context {teacher.config.block_size} tokens is shorter than the "
            f"student's {student.config.block_size}"
        )


def teacher_advantages(
    teacher, batch: Batch, adv_B: torch.Tensor, config: PGConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """Each policy token's advantage (B, T): reward_weight x its episode's group advantage
    adv_B (B,) + teacher_weight x the teacher's (losses.distill_advantages, against the
    sampler's log-probs); and the teacher's KL on these tokens: its mean (the k1 estimate of
    KL(student || teacher) per token) and 0.99 quantile."""
    mask_BT = batch.action_mask
    t_logp = frozen_logprobs(teacher, batch, config.temperature).to(mask_BT.device)  # (B, T)
    d_BT = distill_advantages(t_logp, batch.old_logp, mask_BT, config.teacher_discount)
    adv_BT = config.reward_weight * adv_B[:, None] * mask_BT + config.teacher_weight * d_BT
    log_ratio = (batch.old_logp - t_logp)[mask_BT.bool()]  # log pi_student - log pi_teacher
    kl = float(log_ratio.mean()) if log_ratio.numel() else 0.0
    return adv_BT, {"teacher_kl": kl, "teacher_kl_q99": quantile([log_ratio], 0.99)}


def teacher_pass(teacher, tasks: Sequence[Task], config: PGConfig, seed: int) -> float:
    """The teacher's pass rate on a step's tasks, one episode each (a monitor, not trained on)."""
    trajs = rollout_batch(
        teacher,
        list(tasks),
        seed=seed,
        env_config=config.env,
        temperature=config.temperature,
        top_p=config.top_p,
    )
    return sum(t.passed for t in trajs) / max(len(trajs), 1)
