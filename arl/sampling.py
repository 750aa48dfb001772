"""Temperature / top-p sampling that returns the log-probability of what it sampled.

The log-prob is taken under the distribution actually sampled from (after the
temperature and the top-p cut, renormalized), which is the behavior policy mu that
an importance weight must divide by (Chapter 3, Problem 16). `sample(..., with_entropy=True)`
also returns the entropy of the untempered policy (temperature 1, no cut) at the same
position, from the same logits: evaluation's action entropy, without a second forward pass.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def _top_p_cut(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Log-probs (B, V) renormalized on the smallest top-p set; -inf outside it."""
    if top_p >= 1.0:
        return logp
    sorted_logp, order = logp.sort(dim=-1, descending=True)  # (B, V)
    cum = sorted_logp.exp().cumsum(-1)
    # keep the smallest prefix whose mass reaches top_p (the first token always stays)
    drop_sorted = (cum - sorted_logp.exp()) >= top_p
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    logp = logp.masked_fill(drop, float("-inf"))
    return logp - torch.logsumexp(logp, dim=-1, keepdim=True)


def sampling_logprobs(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0):
    """Log-probs (B, V) of the sampling distribution; -inf outside the top-p set."""
    if temperature <= 0:
        greedy = logits.argmax(-1, keepdim=True)  # (B, 1)
        out = torch.full_like(logits, float("-inf"))
        return out.scatter(-1, greedy, 0.0)
    return _top_p_cut(F.log_softmax(logits.float() / temperature, dim=-1), top_p)


def entropy_of(logp: torch.Tensor, p: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy (B,) in nats of log-probs (B, V), as arl.losses.token_logprobs computes it;
    -inf entries (masked tokens) add 0. `p`: logp.exp(), if the caller has it already."""
    p = logp.exp() if p is None else p
    return -(p * logp.masked_fill(logp == float("-inf"), 0.0)).sum(-1)


def policy_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (B,) of the policy at temperature 1 with no top-p cut, from logits (B, V)."""
    return entropy_of(F.log_softmax(logits.float(), dim=-1))


def sample(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    with_entropy: bool = False,
):
    """Sample one token per row of (B, V) logits; returns ids (B,) and their log-probs (B,);
    with_entropy: and the temperature-1 policy's entropy (B,) at each row (`policy_entropy`),
    whatever `temperature` and `top_p` the token was sampled with. At temperature 1 it reuses
    the sampler's log-softmax (and, without a cut, its probabilities): one sum per row more."""
    if temperature != 1.0:
        logp = sampling_logprobs(logits, temperature, top_p)  # (B, V)
        probs = logp.exp()
        entropy = policy_entropy(logits) if with_entropy else None
    else:
        base = F.log_softmax(logits.float() / temperature, dim=-1)  # (B, V) as sampling_logprobs
        logp = _top_p_cut(base, top_p)
        probs = logp.exp()
        entropy = entropy_of(base, probs if top_p >= 1.0 else None) if with_entropy else None
    ids = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
    chosen = logp.gather(-1, ids[:, None]).squeeze(-1)  # (B,)
    return (ids, chosen, entropy) if with_entropy else (ids, chosen)
