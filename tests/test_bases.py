"""The shared starting policies: the weak base's data, and the cold start chosen by state."""

from dataclasses import replace

import pytest
import torch

from arl.experiments import bases
from arl.experiments.bases import BaseConfig, train_oracle_sft, weak_base_data


def test_weak_base_data_is_format_without_skill():
    data = weak_base_data(BaseConfig())
    assert len(data) == 160  # 4 blind + 4 read-then-guess episodes per training task
    assert all(t.outcome.malformed == 0 for t in data)
    reads = sum(t.outcome.read for t in data) / len(data)
    passed = sum(t.passed for t in data) / len(data)
    assert reads == pytest.approx(0.5) and passed <= 0.3


@pytest.mark.parametrize("threshold, step, reached", [(0.75, 10, True), (0.99, 20, False)])
def test_the_cold_start_is_the_first_checkpoint_that_reaches_the_pass_rate(
    tmp_path, monkeypatch, threshold, step, reached
):
    monkeypatch.setenv("ARL_CACHE", str(tmp_path))
    rates = {0: 0.1, 5: 0.5, 10: 0.8, 15: 0.7, 20: 0.9}  # train pass by step (scripted)
    seen: list[int] = []

    def fake_pass(model, samples, seed):
        s = len(seen) * 5
        seen.append(s)
        return rates.get(s, rates[20])  # the last call: the final model, when never reached

    monkeypatch.setattr(bases, "train_pass", fake_pass)
    cfg = replace(BaseConfig().quick(), cold_start_pass=threshold)  # checks every 5 steps
    final, cold, history = train_oracle_sft(cfg)
    info = history[-1]["cold_start"]
    assert (info["step"], info["reached"]) == (step, reached)
    pairs = zip(cold.parameters(), final.parameters(), strict=True)
    same = all(torch.equal(a, b) for a, b in pairs)
    assert same == (not reached)  # a reached cold start is an earlier copy, not the final model
