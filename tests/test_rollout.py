import torch

from arl.batch import collate
from arl.gym.tasks import tasks_for
from arl.losses import token_logprobs
from arl.rollout import rollout_batch, scripted_rollout
from arl.text import render_episode
from arl.types import POLICY


def test_same_seed_same_trajectories_different_seed_differs(tiny_model):
    tasks = tasks_for("train")[:8]
    a = rollout_batch(tiny_model, tasks, seed=5)
    b = rollout_batch(tiny_model, tasks, seed=5)
    c = rollout_batch(tiny_model, tasks, seed=6)
    assert [t.ids_T for t in a] == [t.ids_T for t in b]
    assert [t.logprobs_T for t in a] == [t.logprobs_T for t in b]
    assert [t.ids_T for t in a] != [t.ids_T for t in c]


def test_recomputed_logprobs_equal_sampled_ones(tiny_model):
    trajs = rollout_batch(tiny_model, tasks_for("train")[:6], seed=0)
    batch = collate(trajs)
    logp = token_logprobs(tiny_model, batch)
    m = batch.action_mask.bool()
    assert m.sum() > 20
    torch.testing.assert_close(logp[m], batch.old_logp[m], atol=1e-5, rtol=1e-5)


def test_temperature_logprobs_are_the_sampled_distribution(tiny_model):
    trajs = rollout_batch(tiny_model, tasks_for("train")[:4], seed=0, temperature=0.5)
    batch = collate(trajs)
    logits, _ = tiny_model(batch.input_ids)
    logp_t = torch.log_softmax(logits / 0.5, -1).gather(-1, batch.targets[..., None])[..., 0]
    m = batch.action_mask.bool()
    torch.testing.assert_close(logp_t[m], batch.old_logp[m], atol=1e-5, rtol=1e-5)


def test_cached_and_recomputed_rollouts_are_identical(tiny_model):
    tasks = tasks_for("heldout")[:5]
    a = rollout_batch(tiny_model, tasks, seed=2, use_cache=True)
    b = rollout_batch(tiny_model, tasks, seed=2, use_cache=False)
    assert [t.ids_T for t in a] == [t.ids_T for t in b]


def test_rollout_matches_the_renderer(tiny_model, vocab):
    for tr in rollout_batch(tiny_model, tasks_for("train")[:4], seed=1):
        calls = [tr.ids_T[s:e] for s, e in tr.calls]
        obs = []
        for k, (_, e) in enumerate(tr.calls):
            nxt = tr.calls[k + 1][0] if k + 1 < len(tr.calls) else len(tr.ids_T)
            obs.append(vocab.decode(tr.ids_T[e + 1 : nxt - 1]) if nxt > e else None)
        ids, owners = render_episode(tr.task, calls, obs, vocab)
        assert tuple(ids) == tr.ids_T and tuple(owners) == tr.owners_T
        assert all(tr.owners_T[i] == POLICY for s, e in tr.calls for i in range(s, e))


def test_untrained_model_emits_malformed_calls_and_earns_nothing(tiny_model):
    trajs = rollout_batch(tiny_model, tasks_for("train"), seed=0)
    malformed = sum(t.info["malformed"] for t in trajs) / len(trajs)
    assert malformed > 4 and all(t.reward == 0 for t in trajs)


def test_scripted_episode_goes_through_the_same_renderer(vocab):
    task = tasks_for("train")[0]
    tr = scripted_rollout("oracle", task, seed=0)
    assert tr.passed and tr.reward == 1.0 and len(tr.calls) == 4
    calls = [tr.ids_T[s:e] for s, e in tr.calls]
    words = [vocab.decode(c) for c in calls]
    assert words[0] == ["read", "<end>"] and words[-1] == ["submit", "<end>"]
    no_wrap = scripted_rollout("oracle", task, seed=0, wrap_obs=False)
    assert len(no_wrap) == len(tr) - 6  # three observations lose <obs> and </obs>
    assert no_wrap.action_ids == tr.action_ids
