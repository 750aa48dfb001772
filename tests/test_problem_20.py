"""Problem 20: the mismatch metric on a hand case, the bf16 sampler against the fp32 one on the
same weights, the config's refusal of an unknown dtype, and the --quick measure and figure."""

import copy
from dataclasses import replace

import pytest
import torch

from arl.errors import ArlError
from arl.experiments.problems import precision as p20
from arl.experiments.problems.common import Ctx
from arl.gym import default_vocab
from arl.gym.tasks import tasks_for
from arl.model import TinyAgent, TinyAgentConfig
from arl.train.pg import train_pg
from arl.train.pg_config import PGConfig, flat_saved, make_config
from arl.train.pg_groups import in_sampler_dtype
from arl.train.pg_metrics import mismatch_stats

TASKS = tasks_for("train")[::5]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_mismatch_stats_on_a_hand_case():
    # 0, 1, ..., 1000 in two parts: mean 500; the 99.9th percentile sits at position
    # 0.999 x 1000 = 999 of the sorted values (linear interpolation lands on it exactly)
    parts = [torch.arange(0, 600, dtype=torch.float), torch.arange(600, 1001, dtype=torch.float)]
    assert mismatch_stats(parts) == {"mismatch/mean": 500.0, "mismatch/p999": 999.0}
    # 1000 tokens: 998 at 0.001 and two at 5 nats: the mean moves little, the tail sees them
    x = torch.full((1000,), 0.001)
    x[:2] = 5.0
    got = mismatch_stats([x])
    assert got["mismatch/mean"] == pytest.approx((998 * 0.001 + 10) / 1000)
    # sorted: 998 x 0.001 then 5, 5; position 0.999 x 999 = 998.001 -> 5 (both neighbours 5)
    assert got["mismatch/p999"] == pytest.approx(5.0)
    assert mismatch_stats([]) == {"mismatch/mean": 0.0, "mismatch/p999": 0.0}


@pytest.fixture(scope="module")
def tiny():
    """A small random TinyAgent with logits large enough for bf16 rounding to show."""
    torch.manual_seed(0)
    config = TinyAgentConfig(
        vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2, block_size=256
    )
    model = TinyAgent(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)  # tied: logits of a few nats (entropy ~1.8)
    return model


ONE = PGConfig(steps=1, tasks_per_step=2, group_size=4, staleness=0, minibatches=1)


def test_a_bf16_sampler_differs_from_the_trainer_and_fp32_does_not(tiny):
    """Step 1 samples with the very weights the trainer scores: the fp32 sampler's log-probs
    equal the trainer's up to the KV cache's summation order (< 1e-5 nats), bf16's do not."""
    fp32 = train_pg(copy.deepcopy(tiny), ONE, TASKS)[0]
    bf16 = train_pg(copy.deepcopy(tiny), replace(ONE, sampler_dtype="bfloat16"), TASKS)[0]
    assert fp32["mismatch/mean"] < 1e-6 and fp32["mismatch/p999"] < 1e-5
    assert bf16["mismatch/mean"] > 1e-3 and bf16["mismatch/p999"] > 1e-2
    assert bf16["mismatch/p999"] >= bf16["mismatch/mean"]


def test_the_sampler_copy_holds_the_same_weights_rounded_to_bf16(tiny):
    low = copy.deepcopy(tiny).to(torch.bfloat16)
    with torch.no_grad():
        low.lm_head.weight.zero_()  # stale: the copy must be refreshed from the trainer's
    got = in_sampler_dtype(tiny, low)
    assert got is low and got.lm_head.weight.dtype == torch.bfloat16
    for (n, a), (_, b) in zip(tiny.state_dict().items(), got.state_dict().items(), strict=True):
        assert torch.equal(b, a.to(torch.bfloat16)), n
    assert in_sampler_dtype(tiny, None) is tiny


def test_unknown_sampler_dtype_is_refused_in_one_line():
    with pytest.raises(ArlError, match=r"^sampler_dtype: must be one of float32, bfloat16"):
        make_config({"sampler_dtype": "float16"})
    with pytest.raises(ArlError, match="sampler_dtype: .*not with rollout_workers"):
        PGConfig(sampler_dtype="bfloat16", rollout_workers=1)
    assert flat_saved({"lr": 1e-3})["sampler_dtype"] == "float32"  # an older checkpoint's


@pytest.fixture(scope="module")
def quick_seed(private_cache):
    """One --quick seed, measured once for the module (private base cache, one thread)."""
    res, detail = p20.PROBLEM_20.measure(Ctx(number=20, quick=True, seed=0))
    return {"seed": 0, **res, "detail": detail}


def test_quick_measure_logs_the_mismatch_of_every_arm(quick_seed):
    r = quick_seed
    assert set(r["history"]) == set(p20.ARMS)
    for h in r["history"].values():  # 4 training steps, and the fixed evaluations beside them
        assert len([x for x in h if x.get("mismatch/p999") is not None]) == 4
        assert [x["step"] for x in h if x.get("eval/train_pass") is not None] == [0, 2, 4]
    s1 = r["step1"]
    assert r["holds"] and s1[p20.FP32]["mismatch/mean"] < p20.FP32_ZERO
    assert s1[p20.BF16_IS] == s1[p20.BF16_NO]  # the same weights and seed sample alike at step 1
    assert r["effect"] == pytest.approx(
        s1[p20.BF16_IS]["mismatch/mean"] - s1[p20.FP32]["mismatch/mean"]
    )
    assert r["effect"] > 0
    fl = r[p20.BF16_IS]["mismatch/p999"]
    assert r["growth_p999"] == pytest.approx(fl["last"] / fl["first"])
    assert "rank correlation" in r["detail"]


def test_quick_figure_is_drawn_over_seeds(quick_seed, tmp_path):
    path = tmp_path / "problem-20.png"
    p20.PROBLEM_20.draw([quick_seed, {**quick_seed, "seed": 1}], path)
    assert path.stat().st_size > 10_000


def test_rank_corr_reads_a_falling_pair_as_negative():
    assert p20.rank_corr([3.0, 2.0, 1.0], [1.0, 2.0, 5.0]) == pytest.approx(-1.0)
    assert p20.rank_corr([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0
    # ties share their mean rank: x ranks (0.5, 0.5, 2), y (0, 1, 2) -> r = 0.866
    assert p20.rank_corr([1.0, 1.0, 2.0], [1.0, 2.0, 3.0]) == pytest.approx(0.75**0.5)
