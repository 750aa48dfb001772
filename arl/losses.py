"""The math every recipe shares: masked log-probs, aggregation, and one loss per weighting.

Every recipe computes sum_i w_i * grad log pi(tau_i) over masked action tokens
(Figure 15.1); they differ in where tau_i comes from and in w_i. Each function
here is small and pure, so tests can check it against hand-worked numbers.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from arl.batch import Batch, bucket_plan, default_budget, row_extents
from arl.errors import ArlError

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "constant")


def _target_logprobs(logits_bLV: torch.Tensor, targets_bL: torch.Tensor, temperature: float):
    """Log-prob (b, L) of each target under temperature-scaled logits (b, L, V), and the
    entropy (b, L) as a function to call only when wanted."""
    logp_all = F.log_softmax(logits_bLV.float() / temperature, dim=-1)  # (b, L, V)
    logp = logp_all.gather(-1, targets_bL[..., None]).squeeze(-1)  # (b, L)
    return logp, lambda: -(logp_all.exp() * logp_all).sum(-1)  # (b, L)


def token_logprobs(
    model,
    batch: Batch,
    with_entropy: bool = False,
    temperature: float = 1.0,
    budget: int | None | str = "auto",
):
    """Log-prob (B, T) of each target under the temperature-scaled model; with_entropy: and the
    entropy (B, T). The one log-prob function of every recipe: the sampler's stored log-probs
    are taken at the same temperature, so ratios against them compare like with like (Problem 16).

    The model runs on length buckets (batch.bucket_plan: rows sorted by length, at most
    `budget` padded tokens a forward), not on the padded whole, and the (B, T) result is
    assembled from them, 0 past each row's extent. The model is causal, so every real position
    gets the padded forward's value (up to float summation order); the loss is taken on the
    assembled tensor, so its normalizer stays global (Problem 2). budget None: one padded forward;
    "auto": batch.default_budget of the batch's device. A model on another device (an HF model
    on CUDA) runs there, and the (B, T) results come back to the batch's device: only they
    travel, never the (B, T, V) logits, and the recipes' own tensors stay where they are.
    """
    home, there = batch.input_ids.device, next(model.parameters()).device
    if there != home:
        out = token_logprobs(model, batch.to(there), with_entropy, temperature, budget)
        return tuple(x.to(home) for x in out) if with_entropy else out.to(home)
    if budget == "auto":
        budget = default_budget(batch.input_ids.device)
    if budget is None:
        logits, _ = model(batch.input_ids)  # (B, T, V)
        logp, entropy = _target_logprobs(logits, batch.targets, temperature)
        return (logp, entropy()) if with_entropy else logp
    B, T = batch.input_ids.shape
    dev = batch.input_ids.device
    extents = row_extents(batch)  # (B,)
    order: list[int] = []
    parts: list[torch.Tensor] = []  # per bucket (b, T): log-probs, then entropies
    ent_parts: list[torch.Tensor] = []
    for rows, L in bucket_plan(extents.tolist(), budget):
        idx = torch.tensor(rows, device=dev)  # (b,)
        logits, _ = model(batch.input_ids[idx, :L])  # (b, L, V)
        logp, entropy = _target_logprobs(logits, batch.targets[idx, :L], temperature)
        parts.append(F.pad(logp, (0, T - L)))  # (b, T)
        if with_entropy:
            ent_parts.append(F.pad(entropy(), (0, T - L)))
        order += rows
    inv = torch.empty(B, dtype=torch.long, device=dev)
    inv[torch.tensor(order, device=dev)] = torch.arange(B, device=dev)  # (B,) row -> its place
    real = torch.arange(T, device=dev)[None, :] < extents[:, None].to(dev)  # (B, T)
    logp = torch.where(real, torch.cat(parts)[inv], 0.0)  # (B, T)
    if not with_entropy:
        return logp
    return logp, torch.where(real, torch.cat(ent_parts)[inv], 0.0)


def token_weights(
    mask_BT: torch.Tensor,
    mode: str = "token_mean",
    normalizer: float | None = None,
    n_seqs: int | None = None,
) -> torch.Tensor:
    """The weight each token's term gets under an aggregation (Problem 1), (B, T).

    token_mean: 1 / (tokens in the batch, or `normalizer` if given: the global count
    of an accumulated step). seq_mean_token_mean: 1 / (B * L_i). constant: 1 / normalizer
    (B * L_max by default). n_seqs replaces B when the rows are one microbatch of a step.
    """
    T = mask_BT.shape[1]
    B = n_seqs if n_seqs is not None else mask_BT.shape[0]
    if mode == "token_mean":
        n = max(float(normalizer), 1.0) if normalizer is not None else mask_BT.sum().clamp(min=1)
        return mask_BT / n
    if mode == "seq_mean_token_mean":
        L_B = mask_BT.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
        return mask_BT / (L_B * B)
    if mode == "constant":
        return mask_BT / (normalizer if normalizer is not None else B * T)
    raise ArlError(f"unknown aggregation {mode!r} (choose from {', '.join(AGGREGATIONS)})")


def aggregate(
    values_BT: torch.Tensor, mask_BT: torch.Tensor, mode: str = "token_mean", normalizer=None
) -> torch.Tensor:
    """Weighted sum of per-token values under an aggregation mode (a scalar)."""
    return (token_weights(mask_BT, mode, normalizer) * values_BT).sum()


def sft_loss(logp_BT: torch.Tensor, mask_BT: torch.Tensor, mode: str = "token_mean"):
    """Trajectory SFT: negative log-likelihood of the action tokens only (Section 15.1)."""
    return -aggregate(logp_BT, mask_BT, mode)


def pg_loss(
    logp_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    mask_BT: torch.Tensor,
    mode: str = "token_mean",
    normalizer=None,
) -> torch.Tensor:
    """REINFORCE surrogate -sum_t w_t A_i log pi(y_t): each token gets its episode's advantage."""
    return -aggregate(advantages_B[:, None] * logp_BT, mask_BT, mode, normalizer)


def group_advantages(
    rewards_G: torch.Tensor, baseline: str = "mean", std: bool = False, eps: float = 1e-6
) -> torch.Tensor:
    """Advantages within one group of G episodes of a task (Problem 4).

    baseline: "mean" (r - mean), "loo" (r - mean of the others), or "none".
    std divides by the group's population standard deviation.
    """
    G = rewards_G.numel()
    if baseline == "mean":
        adv = rewards_G - rewards_G.mean()
    elif baseline == "loo":
        adv = (rewards_G - rewards_G.mean()) * G / max(G - 1, 1)
    elif baseline == "none":
        adv = rewards_G.clone()
    else:
        raise ArlError(f"unknown baseline {baseline!r} (choose from mean, loo, none)")
    if std:
        adv = adv / (rewards_G.std(unbiased=False) + eps)
    return adv


def episode_logp(logp_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Summed log-prob of each episode's action tokens, (B,): log pi(tau) up to env terms."""
    return (logp_BT * mask_BT).sum(-1)


def dpo_loss(
    policy_chosen_B: torch.Tensor,
    policy_rejected_B: torch.Tensor,
    ref_chosen_B: torch.Tensor,
    ref_rejected_B: torch.Tensor,
    beta: float = 0.1,
) -> torch.Tensor:
    """-log sigmoid(beta * [(log pi - log ref)(chosen) - (log pi - log ref)(rejected)]), mean."""
    margin_B = (policy_chosen_B - ref_chosen_B) - (policy_rejected_B - ref_rejected_B)
    return -F.logsigmoid(beta * margin_B).mean()


# --- KL estimators (Problem 5); log_ratio = log pi_ref(y) - log pi_theta(y), y ~ pi_theta ------


def kl_k1(log_ratio: torch.Tensor) -> torch.Tensor:
    return -log_ratio


def kl_k2(log_ratio: torch.Tensor) -> torch.Tensor:
    return 0.5 * log_ratio**2


def kl_k3(log_ratio: torch.Tensor) -> torch.Tensor:
    return torch.expm1(log_ratio) - log_ratio


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def masked_mean(values_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    return (values_BT * mask_BT).sum() / mask_BT.sum().clamp(min=1)


# --- policy-gradient pieces (Chapter 9, Appendix B Problems 1, 2, 16, 26) ----------------------


def loss_weights(
    mask_BT: torch.Tensor, mode: str, n_seqs: int, n_tokens: float, l_max: float
) -> torch.Tensor:
    """Per-token weights (B, T) of one microbatch inside an optimizer step of n_seqs episodes.

    The normalizers are global to the step, counted before any backward pass (Problem 2),
    so the weights summed over the microbatches equal token_weights on the whole batch.
    """
    normalizer = n_tokens if mode == "token_mean" else n_seqs * l_max
    return token_weights(mask_BT, mode, normalizer, n_seqs)


def clipped_surrogate(
    logp_BT: torch.Tensor,
    prox_logp_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's per-token loss -min(r A, clip(r, 1 - low, 1 + high) A), r = pi / pi_prox.

    Separate bounds are DAPO's clip-higher (Problem 26). Returns the loss (B, T) and a
    bool (B, T) marking tokens whose clipped branch is active (their gradient is zero).
    """
    ratio = torch.exp(logp_BT - prox_logp_BT)  # (B, T)
    unclipped = ratio * adv_BT
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv_BT
    loss = -torch.minimum(unclipped, clipped)
    active = ((adv_BT > 0) & (ratio > 1.0 + clip_high)) | ((adv_BT < 0) & (ratio < 1.0 - clip_low))
    return loss, active


def truncated_is_weights(
    prox_logp_BT: torch.Tensor, mu_logp_BT: torch.Tensor, cap: float = 2.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token min(pi_prox / mu, C) against the sampler's log-probs mu (Problem 16).

    Returns the (detached) weights (B, T) and a bool (B, T) marking the capped tokens.
    """
    ratio = torch.exp((prox_logp_BT - mu_logp_BT).detach())  # (B, T)
    return ratio.clamp(max=cap), ratio > cap


def kl_to_reference(
    logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-token KL(pi_theta || pi_ref) estimate (B, T) from log ratio = log ref - log pi."""
    if estimator not in KL_ESTIMATORS:
        raise ArlError(f"unknown KL estimator {estimator!r} (choose from k1, k2, k3)")
    return KL_ESTIMATORS[estimator](ref_logp_BT - logp_BT)


def ppo_token_loss(
    logp_BT: torch.Tensor,
    prox_logp_BT: torch.Tensor,
    mu_logp_BT: torch.Tensor,
    adv_B: torch.Tensor,
    *,
    clip: bool = True,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    is_correction: bool = True,
    is_cap: float = 2.0,
    ref_logp_BT: torch.Tensor | None = None,
    kl: str = "k3",
    kl_beta: float = 0.0,
    entropy_BT: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The PPO/GRPO per-token loss (B, T), before the aggregation weights (Chapter 9).

    loss_t = min(pi_prox / mu, C) * surrogate_t + beta * KL_t(pi || ref) - coef * H_t, where
    surrogate_t is PPO's clipped -min(r A, clip(r) A) with r = pi / pi_prox (or -r A with
    clip off), every token carrying its episode's advantage A (adv_B (B,)), or its own
    (adv_B (B, T): on-policy distillation's per-token advantage). The KL term is added only when
    ref_logp_BT is given, the entropy bonus only when entropy_coef is nonzero. Returns the
    loss (B, T), and bool (B, T) masks of the clipped and the importance-capped tokens.
    """
    # (B, T): each token gets its episode's A, or its own when adv_B is already per token
    adv_BT = adv_B if adv_B.dim() == 2 else adv_B[:, None].expand_as(logp_BT)
    if clip:
        loss_BT, clipped_BT = clipped_surrogate(logp_BT, prox_logp_BT, adv_BT, clip_low, clip_high)
    else:
        loss_BT = -torch.exp(logp_BT - prox_logp_BT) * adv_BT
        clipped_BT = torch.zeros_like(logp_BT, dtype=torch.bool)
    w_is_BT, capped_BT = truncated_is_weights(prox_logp_BT, mu_logp_BT, is_cap)
    if is_correction:
        loss_BT = w_is_BT * loss_BT
    loss_BT = regularized(loss_BT, logp_BT, ref_logp_BT, kl, kl_beta, entropy_BT, entropy_coef)
    return loss_BT, clipped_BT, capped_BT


def regularized(
    loss_BT: torch.Tensor,
    logp_BT: torch.Tensor,
    ref_logp_BT: torch.Tensor | None,
    kl: str,
    kl_beta: float,
    entropy_BT: torch.Tensor | None,
    entropy_coef: float,
) -> torch.Tensor:
    """loss_t + beta * KL_t(pi || ref) - coef * H_t (B, T): the KL term only when ref_logp_BT
    is given, the entropy bonus only when entropy_coef is nonzero (every PG token loss's)."""
    if ref_logp_BT is not None:
        loss_BT = loss_BT + kl_beta * kl_to_reference(logp_BT, ref_logp_BT, kl)
    if entropy_coef:
        loss_BT = loss_BT - entropy_coef * entropy_BT
    return loss_BT


def sequence_log_ratio(
    logp_BT: torch.Tensor, prox_logp_BT: torch.Tensor, mask_BT: torch.Tensor
) -> torch.Tensor:
    """GSPO's log s_i (B,): the mean over episode i's masked tokens of log pi - log pi_prox.

    s_i = (pi(y_i) / pi_prox(y_i))^(1 / |y_i|) is the geometric mean of the token ratios: the
    length normalization keeps it near 1 however long the episode, which is why its clip range
    is ~1e-4 where PPO's token ratio takes 0.2. An episode with no masked token gets 0 (s = 1).
    """
    L_B = mask_BT.sum(1).clamp(min=1)  # (B,) policy tokens of each episode
    return ((logp_BT - prox_logp_BT) * mask_BT).sum(1) / L_B


def gspo_token_loss(
    logp_BT: torch.Tensor,
    prox_logp_BT: torch.Tensor,
    mu_logp_BT: torch.Tensor,
    adv_B: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip: bool = True,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    is_correction: bool = True,
    is_cap: float = 2.0,
    ref_logp_BT: torch.Tensor | None = None,
    kl: str = "k3",
    kl_beta: float = 0.0,
    entropy_BT: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GSPO's per-token loss (B, T), before the aggregation weights (Zheng et al. 2025).

    Episode i's loss l_i = -min(s_i A_i, clip(s_i, 1 - low, 1 + high) A_i), s_i the sequence
    ratio (sequence_log_ratio; -s_i A_i with clip off), is carried by each of its masked tokens,
    so a token's gradient is l_i's through s_i: s_i / |y_i| * grad log pi(y_t) where unclipped.
    Under seq_mean_token_mean's weights (1 / (B |y_i|)) the sum is GSPO's 1/G sum_i l_i; under
    token_mean an episode weighs by its length. The sampler correction stays per token
    (min(pi_prox / mu, C) times l_i), and the KL and entropy terms are ppo_token_loss's.
    adv_B is one advantage per episode (B,). Returns the loss (B, T), and bool (B, T) masks of
    the tokens of clipped episodes and of the importance-capped tokens.
    """
    if adv_B.dim() != 1:
        raise ArlError("gspo: needs one advantage per episode (B,), not per token")
    log_s_B = sequence_log_ratio(logp_BT, prox_logp_BT, mask_BT)  # (B,)
    if clip:  # PPO's clipped surrogate, elementwise, on s_i = exp(log s_i - 0)
        loss_B, clipped_B = clipped_surrogate(
            log_s_B, torch.zeros_like(log_s_B), adv_B, clip_low, clip_high
        )
    else:
        loss_B = -torch.exp(log_s_B) * adv_B
        clipped_B = torch.zeros_like(adv_B, dtype=torch.bool)
    loss_BT = loss_B[:, None] * mask_BT  # (B, T) each policy token carries its episode's l_i
    clipped_BT = clipped_B[:, None] & mask_BT.bool()  # (B, T)
    w_is_BT, capped_BT = truncated_is_weights(prox_logp_BT, mu_logp_BT, is_cap)
    if is_correction:
        loss_BT = w_is_BT * loss_BT
    loss_BT = regularized(loss_BT, logp_BT, ref_logp_BT, kl, kl_beta, entropy_BT, entropy_coef)
    return loss_BT, clipped_BT, capped_BT


def distill_advantages(
    teacher_logp_BT: torch.Tensor,
    student_logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    discount: float = 0.0,
) -> torch.Tensor:
    """On-policy distillation's per-token advantage (B, T): sg[log pi_teacher - log
    pi_student] of each sampled policy token, 0 on every other token; with `discount` g > 0,
    each policy token also gets g^k times the k-th next policy token's (environment tokens
    between them are not steps). A teacher that agrees with the student gives 0 everywhere."""
    delta_BT = (teacher_logp_BT - student_logp_BT).detach() * mask_BT  # (B, T)
    if not discount:
        return delta_BT
    out_BT = torch.zeros_like(delta_BT)
    acc_B = torch.zeros(delta_BT.size(0), dtype=delta_BT.dtype)  # (B,) the discounted sum
    for t in range(delta_BT.size(1) - 1, -1, -1):  # from the last token back
        on_B = mask_BT[:, t] > 0
        acc_B = torch.where(on_B, delta_BT[:, t] + discount * acc_B, acc_B)
        out_BT[:, t] = torch.where(on_B, acc_B, torch.zeros_like(acc_B))
    return out_BT


def entropy_controller(coef: float, entropy: float, target: float, lr: float) -> float:
    """One step of the target-entropy controller: raise the bonus when entropy is below target."""
    return max(0.0, coef + lr * (target - entropy))


def degenerate_groups(rewards_NG: torch.Tensor) -> torch.Tensor:
    """(N,) bool: groups whose rewards are all equal (zero advantage, zero gradient; Problem 3)."""
    return (rewards_NG == rewards_NG[:, :1]).all(dim=1)
