"""The deliberate bugs that Problems 2 and 28 measure, kept out of the production trainer.

Each plugs into a seam of arl.train.pg: a weights function for accumulate_policy_gradient
(`weights=`) or a collate function for train_pg (`collate_fn=`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from arl.batch import Batch, collate
from arl.losses import loss_weights
from arl.train.pg_config import PGConfig
from arl.types import POLICY, Trajectory


def per_microbatch_mean(mask_bT, config: PGConfig, n_seqs: int, n_tokens: float, n_micro: int):
    """Problem 2's bug: each microbatch normalized by its own counts, the losses averaged."""
    b = mask_bT.shape[0]
    return loss_weights(mask_bT, config.aggregation, b, mask_bT.sum(), config.l_max) / n_micro


def shifted_mask(batch: Batch) -> Batch:
    """Problem 28's bug: the mask aligned to ids[:, :-1] instead of the targets."""
    inputs_owner = torch.cat([torch.full_like(batch.owners[:, :1], -1), batch.owners[:, :-1]], 1)
    return replace(batch, action_mask=(inputs_owner == POLICY).float())


def collate_shifted(trajectories: Sequence[Trajectory]) -> Batch:
    """collate with Problem 28's shifted mask (its check_batch would refuse it)."""
    return shifted_mask(collate(trajectories, check=False))
