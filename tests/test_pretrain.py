"""Next-token pretraining: the loss against a hand-computed NLL, padding, and that it learns."""

import math

import pytest
import torch

from arl.errors import ArlError
from arl.model import TinyAgent, TinyAgentConfig
from arl.train.pretrain import IGNORE, PretrainConfig, lm_loss, lm_pretrain, pad_batch


def _model(seed: int = 0) -> TinyAgent:
    torch.manual_seed(seed)
    return TinyAgent(TinyAgentConfig(vocab_size=12, n_layer=2, n_embd=32, n_head=2))


def test_pad_batch_shifts_by_one_and_ignores_padding():
    x, y = pad_batch([[1, 2, 3], [4, 5]])
    assert x.tolist() == [[1, 2], [4, 0]]
    assert y.tolist() == [[2, 3], [5, IGNORE]]


def test_lm_loss_is_the_mean_nll_over_real_targets():
    model = _model()
    seqs = [[1, 2, 3, 4], [5, 6]]
    x, y = pad_batch(seqs)
    with torch.no_grad():
        got = float(lm_loss(model, x, y))
        terms = []  # by hand: one sequence at a time, no padding anywhere
        for s in seqs:
            logits, _ = model(torch.tensor([s[:-1]]))
            logp = torch.log_softmax(logits[0], -1)  # (T-1, V)
            terms += [-float(logp[t, s[t + 1]]) for t in range(len(s) - 1)]
    assert got == pytest.approx(sum(terms) / len(terms), rel=1e-5)  # 4 targets, not 6


def test_pretraining_learns_to_copy_a_name_it_read():
    # "a N b N": the second N is the first one, drawn afresh per sequence from 8 names
    seqs = [[1, n, 2, n] for n in range(3, 11)]
    model = _model()
    x, y = pad_batch(seqs)
    with torch.no_grad():
        before = float(lm_loss(model, x, y))
    history = lm_pretrain(model, seqs, PretrainConfig(steps=300, batch_size=8, lr=1e-2))
    with torch.no_grad():
        logits, _ = model(x)
    copied = (logits[:, 2].argmax(-1) == torch.tensor([s[3] for s in seqs])).float().mean()
    assert len(history) == 300 and history[-1]["loss"] < before
    assert float(copied) == 1.0  # chance would be 1/8
    assert before == pytest.approx(math.log(12), abs=0.5)


def test_pretraining_refuses_sequences_with_nothing_to_predict():
    with pytest.raises(ArlError, match="two tokens"):
        lm_pretrain(_model(), [[1]], PretrainConfig(steps=1))
    with pytest.raises(ArlError, match="steps"):
        PretrainConfig(steps=-1)
