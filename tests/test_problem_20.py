"""Problem 20: the mismatch metrics (k3, capped fraction, mean and tail) on hand cases, the
noisy and the bf16 samplers against the exact one on the same weights, the config's refusals,
and the --quick measure (every claim's effect) and figure."""

import copy
import math
from dataclasses import asdict, replace

import pytest
import torch

from arl.batch import collate
from arl.bugfix import default_vocab
from arl.bugfix.tasks import tasks_for
from arl.errors import ArlError
from arl.experiments.problems import precision as p20
from arl.experiments.problems.common import Ctx
from arl.model import TinyAgent, TinyAgentConfig
from arl.rollout import rollout_batch
from arl.train.common import frozen_logprobs
from arl.train.pg import accumulate_policy_gradient, train_pg
from arl.train.pg_config import PGConfig, flat_saved, make_config, pg_settings
from arl.train.pg_groups import NoisyLogits, in_sampler_dtype
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


def test_k3_and_capped_fraction_of_the_mismatch_on_a_hand_built_batch(tiny):
    """The trainer's KL(mu || pi_prox) by k3 and its capped fraction, read off a batch whose
    sampler log-probs are set by hand: row 0's tokens with mu = 2 pi_prox (ratio 1/2), row 1's
    with mu = pi_prox / 4 (ratio 4, over the cap 2), the rest exact."""
    trajs = rollout_batch(tiny, [TASKS[0]] * 4, seed=3)
    batch = collate(trajs)
    prox = frozen_logprobs(tiny, batch)  # (B, T)
    on = batch.action_mask.bool()
    delta = torch.zeros_like(prox)  # log mu - log pi_prox
    delta[0], delta[1] = math.log(2.0), -math.log(4.0)
    batch = replace(batch, old_logp=torch.where(on, prox + delta, torch.zeros_like(prox)))
    n0, n1, n = float(on[0].sum()), float(on[1].sum()), float(on.sum())
    assert n0 > 0 and n1 > 0 and n > n0 + n1
    got = accumulate_policy_gradient(
        copy.deepcopy(tiny), batch, torch.zeros(4), ONE, prox_logp=prox
    )
    # k3 of r = pi_prox / mu: r - 1 - log r; r = 1/2 -> log 2 - 1/2 = 0.19315, r = 4 -> 3 - log 4
    k3_half, k3_four = math.log(2.0) - 0.5, 3.0 - math.log(4.0)
    assert k3_half == pytest.approx(0.193147, abs=1e-6) and k3_four == pytest.approx(1.613706)
    assert got["kl/mu_k3"] == pytest.approx((n0 * k3_half + n1 * k3_four) / n, rel=1e-5)
    assert got["capped_frac"] == pytest.approx(n1 / n)  # only ratio 4 exceeds the cap 2
    assert got["mismatch/mean"] == pytest.approx((n0 + 2 * n1) * math.log(2.0) / n, rel=1e-5)


def test_noisy_logits_add_the_stated_noise_and_nothing_at_zero(tiny):
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    clean, _ = tiny(ids)  # (1, 6, V)
    assert torch.equal(NoisyLogits(tiny, 0.0, 7)(ids)[0], clean)
    noisy, _ = NoisyLogits(tiny, 0.5, 7)(ids)
    z = (noisy - clean) / 0.5  # (1, 6, V): standard normal draws
    assert z.mean().abs() < 0.2 and (z.std() - 1).abs() < 0.15
    again, _ = NoisyLogits(tiny, 0.5, 7)(ids)
    assert torch.equal(again, noisy)  # seeded: the same noise for the same seed
    # a rollout at noise 0 is the exact sampler's, token for token and log-prob for log-prob
    a = rollout_batch(tiny, TASKS[:2], seed=5)
    b = rollout_batch(NoisyLogits(tiny, 0.0, 1), TASKS[:2], seed=5)
    assert [t.ids_T for t in a] == [t.ids_T for t in b]
    assert [t.logprobs_T for t in a] == [t.logprobs_T for t in b]


def test_a_noisy_sampler_differs_from_the_trainer_and_its_cap_binds(tiny):
    """Step 1 samples with the trainer's weights: the exact sampler's k3 is ~0, a noisy one's
    (sd 1 nat a logit) is not, and some of its tokens' weights pi_prox / mu exceed the cap."""
    exact = train_pg(copy.deepcopy(tiny), ONE, TASKS)[0]
    noisy = train_pg(copy.deepcopy(tiny), replace(ONE, sampler_noise=1.0), TASKS)[0]
    assert exact["kl/mu_k3"] < 1e-8 and exact["capped_frac"] == 0.0
    assert noisy["kl/mu_k3"] > 1e-2 and noisy["capped_frac"] > 0.0


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
    assert flat_saved({"lr": 1e-3})["sampler_noise"] == 0.0
    with pytest.raises(ArlError, match="sampler_noise: .*not with rollout_workers"):
        PGConfig(sampler_noise=1.0, rollout_workers=1)


def test_a_locked_rule_sees_sampler_noise_only_when_it_is_set():
    """Chapter 15's lock recorded a whole PGConfig before sampler_noise existed: at its default
    the field is left out of the settings (the lock still matches), set it is kept."""
    assert "sampler_noise" not in pg_settings(PGConfig())
    assert pg_settings(PGConfig()) | {"sampler_noise": 0.0} == asdict(PGConfig())
    assert pg_settings(PGConfig(sampler_noise=0.5))["sampler_noise"] == 0.5


@pytest.fixture(scope="module")
def quick_seed(private_cache):
    """One --quick seed, measured once for the module (private base cache, one thread)."""
    res, detail = p20.PROBLEM_20.measure(Ctx(number=20, quick=True, seed=0))
    return {"seed": 0, **res, "detail": detail}


def test_quick_measure_gives_every_claims_effect(quick_seed):
    r = quick_seed
    assert set(r["history"]) == set(p20.ARMS)
    for h in r["history"].values():  # 4 training steps, and the fixed evaluations beside them
        assert len([x for x in h if x.get(p20.K3) is not None]) == 4
        assert [x["step"] for x in h if x.get(p20.PASS) is not None] == [0, 2, 4]
    s1 = r["step1"]
    assert r["holds"] and s1[p20.EXACT]["mismatch/mean"] < p20.EXACT_ZERO
    assert s1[p20.NOISY_IS] == s1[p20.NOISY_NO]  # the same weights, seed and noise at step 1
    assert r["effect"] == pytest.approx(s1[p20.NOISY_IS][p20.K3] - s1[p20.EXACT][p20.K3])
    assert r["effect"] > 0
    for key, _ in p20.PROBLEM_20.claims:  # every claim's per-seed effect is a number
        assert math.isfinite(r[key]), key
    caps = [x["capped_frac"] for x in r["history"][p20.NOISY_IS] if "capped_frac" in x]
    caps = [c for c in caps if c is not None]
    assert r["capped"] == pytest.approx(sum(caps) / len(caps))

    def tail(arm: str) -> float:  # the last quarter of the 3 evaluations: the last one
        return [x[p20.PASS] for x in r["history"][arm] if x.get(p20.PASS) is not None][-1]

    assert r["is_vs_none"] == pytest.approx(tail(p20.NOISY_IS) - tail(p20.NOISY_NO))
    assert r["damage"] == pytest.approx(tail(p20.EXACT) - tail(p20.NOISY_NO))
    fl = r[p20.NOISY_IS]["mismatch/p999"]
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
