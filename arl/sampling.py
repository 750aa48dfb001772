"""Temperature / top-p sampling that returns the log-probability of what it sampled.

The log-prob is taken under the distribution actually sampled from (after the
temperature and the top-p cut, renormalized), which is the behavior policy mu that
an importance weight must divide by (Chapter 3, Problem 16).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def sampling_logprobs(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0):
    """Log-probs (B, V) of the sampling distribution; -inf outside the top-p set."""
    if temperature <= 0:
        greedy = logits.argmax(-1, keepdim=True)  # (B, 1)
        out = torch.full_like(logits, float("-inf"))
        return out.scatter(-1, greedy, 0.0)
    logp = F.log_softmax(logits.float() / temperature, dim=-1)  # (B, V)
    if top_p >= 1.0:
        return logp
    sorted_logp, order = logp.sort(dim=-1, descending=True)  # (B, V)
    cum = sorted_logp.exp().cumsum(-1)
    # keep the smallest prefix whose mass reaches top_p (the first token always stays)
    drop_sorted = (cum - sorted_logp.exp()) >= top_p
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    logp = logp.masked_fill(drop, float("-inf"))
    return logp - torch.logsumexp(logp, dim=-1, keepdim=True)


def sample(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of (B, V) logits; returns ids (B,) and their log-probs (B,)."""
    logp = sampling_logprobs(logits, temperature, top_p)  # (B, V)
    ids = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)  # (B,)
    return ids, logp.gather(-1, ids[:, None]).squeeze(-1)
