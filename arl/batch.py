"""Collate: trajectories -> one padded batch with the action mask aligned to predicted positions.

Position t of the batch predicts token t+1 of the episode: inputs are ids[:, :-1],
targets are ids[:, 1:], and the action mask is 1 exactly where the *target* is a
policy token. Aligning the mask to ids instead of ids[:, 1:] trains on tool output
(Problem 28); `check_batch` catches it from the owners recorded at rollout time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from arl.types import PAD_OWNER, POLICY, Trajectory


@dataclass(frozen=True)
class Batch:
    """Padded tensors; T is the longest episode minus one (predicted positions)."""

    input_ids: torch.Tensor  # (B, T) ids[:, :-1], 0-padded
    targets: torch.Tensor  # (B, T) ids[:, 1:], 0-padded
    action_mask: torch.Tensor  # (B, T) float, 1 where the target is a policy token
    owners: torch.Tensor  # (B, T) owner of each target, PAD_OWNER on padding
    old_logp: torch.Tensor  # (B, T) sampler log-prob of each target policy token, 0 elsewhere
    rewards: torch.Tensor  # (B,) the trajectories' training rewards
    lengths: torch.Tensor  # (B,) predicted positions per row (episode length - 1)

    @property
    def n_action_tokens(self) -> torch.Tensor:
        return self.action_mask.sum()

    def to(self, device) -> Batch:
        return Batch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


# Padded tokens (rows x the bucket's longest row) one bucketed forward runs at most on CPU;
# chosen once from the sweep in benchmarks/buckets.py (DPO, RL and SFT batches of Chapter 15).
BUCKET_TOKENS = 1024


def default_budget(device: torch.device) -> int | None:
    """The bucket budget token_logprobs uses on `device`: BUCKET_TOKENS on CPU, where it was
    measured; elsewhere None (one padded forward, as before: no accelerator was measured)."""
    return BUCKET_TOKENS if device.type == "cpu" else None


def row_extents(batch: Batch) -> torch.Tensor:
    """(B,) positions each row's forward must cover: its real ones, and any position the mask
    marks past them (Problem 28's shifted mask reaches one position into the padding)."""
    T = batch.action_mask.size(1)
    pos = torch.arange(1, T + 1, device=batch.action_mask.device)  # (T,) 1-based
    marked = ((batch.action_mask != 0) * pos).amax(1)  # (B,) last marked position, 1-based
    return torch.maximum(batch.lengths.to(marked.device), marked).clamp(min=1)


def bucket_plan(extents: Sequence[int], budget: int) -> list[tuple[list[int], int]]:
    """Rows cut into buckets (row indices ascending, width): longest rows first, each bucket
    filled greedily while rows x its longest row stays within `budget` (a row longer than the
    budget alone). Deterministic; every row in exactly one bucket; padding only up to a
    bucket's longest row instead of the batch's."""
    if budget < 1:
        raise ValueError(f"bucket budget must be at least 1 token, got {budget}")
    order = sorted(range(len(extents)), key=lambda i: -int(extents[i]))  # stable: ties by index
    plan: list[tuple[list[int], int]] = []
    for i in order:
        if plan and (len(plan[-1][0]) + 1) * plan[-1][1] <= budget:
            plan[-1][0].append(i)
        else:
            plan.append(([i], int(extents[i])))
    return [(sorted(rows), width) for rows, width in plan]


def check_batch(batch: Batch) -> None:
    """Assert the mask is 1 on every policy target and 0 on every other token (Problem 28)."""
    policy = batch.owners == POLICY
    on = batch.action_mask != 0
    if bool((on & ~policy).any()):
        b, t = (on & ~policy).nonzero()[0].tolist()
        raise AssertionError(f"action mask is 1 on a non-policy token (row {b}, position {t})")
    if bool((policy & ~on).any()):
        b, t = (policy & ~on).nonzero()[0].tolist()
        raise AssertionError(f"action mask is 0 on a policy token (row {b}, position {t})")


def collate(trajectories: Sequence[Trajectory], check: bool = True) -> Batch:
    """Pad trajectories into one Batch: targets = ids[:, 1:], mask from the targets' owners."""
    if not trajectories:
        raise ValueError("collate needs at least one trajectory")
    B = len(trajectories)
    T = max(len(tr) for tr in trajectories) - 1
    ids = torch.zeros(B, T + 1, dtype=torch.long)
    owners = torch.full((B, T + 1), PAD_OWNER, dtype=torch.long)
    logp = torch.zeros(B, T + 1)
    for b, tr in enumerate(trajectories):
        n = len(tr)
        ids[b, :n] = torch.tensor(tr.ids_T, dtype=torch.long)
        owners[b, :n] = torch.tensor(tr.owners_T, dtype=torch.long)
        logp[b, :n] = torch.tensor(tr.logprobs_T)
    target_owners = owners[:, 1:]  # (B, T): the owner of the token each position predicts
    batch = Batch(
        input_ids=ids[:, :-1],
        targets=ids[:, 1:],
        action_mask=(target_owners == POLICY).float(),
        owners=target_owners,
        old_logp=logp[:, 1:],
        rewards=torch.tensor([tr.reward for tr in trajectories], dtype=torch.float),
        lengths=torch.tensor([len(tr) - 1 for tr in trajectories], dtype=torch.long),
    )
    if check:
        check_batch(batch)
    return batch
