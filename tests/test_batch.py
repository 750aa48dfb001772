"""The action mask (Problem 28): written out by hand, and a shifted mask must be caught."""

import dataclasses

import pytest
import torch

from arl.batch import check_batch, collate
from arl.types import ENV, POLICY, PROMPT, TEMPLATE, Trajectory

#            <bos> fix name | read <end> | <obs> def ... </obs> | submit <end>
IDS = (1, 9, 40, 10, 2, 3, 50, 51, 4, 13, 2)
OWNERS = (PROMPT, PROMPT, PROMPT, POLICY, POLICY, TEMPLATE, ENV, ENV, TEMPLATE, POLICY, POLICY)
LOGPS = (0, 0, 0, -0.1, -0.2, 0, 0, 0, 0, -0.3, -0.4)


def hand_trajectory(reward=1.0):
    return Trajectory("t", IDS, OWNERS, tuple(float(x) for x in LOGPS), ((3, 5), (9, 11)), reward)


def test_mask_written_out_by_hand():
    batch = collate([hand_trajectory()])
    # position t predicts IDS[t + 1]; the mask is 1 where that target is a policy token
    expected = [0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    assert batch.action_mask[0].tolist() == expected
    assert batch.targets[0].tolist() == list(IDS[1:])
    assert batch.input_ids[0].tolist() == list(IDS[:-1])
    assert batch.old_logp[0].tolist() == pytest.approx([0, 0, -0.1, -0.2, 0, 0, 0, 0, -0.3, -0.4])


@pytest.mark.parametrize("shift", [1, -1])
def test_shifted_mask_is_caught(shift):
    batch = collate([hand_trajectory()])
    shifted = torch.roll(batch.action_mask, shift, dims=1)
    assert shifted[0].tolist() != [0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    with pytest.raises(AssertionError, match="action mask"):
        check_batch(dataclasses.replace(batch, action_mask=shifted))


def test_mask_aligned_to_ids_instead_of_targets_is_caught():
    batch = collate([hand_trajectory()])
    wrong = (torch.tensor(OWNERS[:-1]) == POLICY).float()[None]  # owners of ids[:, :-1]
    with pytest.raises(AssertionError):
        check_batch(dataclasses.replace(batch, action_mask=wrong))


def test_padding_has_no_mask_and_rewards_carried():
    short = Trajectory("s", IDS[:5], OWNERS[:5], (0.0,) * 5, ((3, 5),), 0.0)
    batch = collate([hand_trajectory(), short])
    assert batch.input_ids.shape == (2, 10)
    assert batch.action_mask[1].tolist() == [0, 0, 1, 1] + [0] * 6
    assert batch.owners[1, 4:].eq(-1).all()
    assert batch.lengths.tolist() == [10, 4] and batch.rewards.tolist() == [1.0, 0.0]
    assert batch.n_action_tokens == 6
