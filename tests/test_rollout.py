import pytest
import torch

from arl.batch import collate
from arl.bugfix.env import BugFixConfig, BugFixEnv
from arl.bugfix.tasks import get_task, tasks_for
from arl.losses import token_logprobs
from arl.rollout import episode_seed, rollout_batch, scripted_rollout
from arl.text import render_episode
from arl.train.bases import oracle_demos
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


def _replay(tr, seed: int, vocab, wrap: bool = True, config=None):
    """Render an episode anew: its calls replayed on a fresh env, the env's own words rendered."""
    env = BugFixEnv(get_task(tr.task), config or BugFixConfig())
    prompt, _ = env.reset(seed=seed)
    calls, observations, reward, outcome = [], [], 0.0, None
    for s, e in tr.calls:
        calls.append(tr.ids_T[s:e])
        obs, r, _, _, outcome = env.step(vocab.decode(tr.ids_T[s:e]))
        observations.append(obs if outcome is None else None)
        reward += r
    ids, owners = render_episode(prompt.words, calls, observations, vocab, wrap)
    return ids, owners, reward, outcome


@pytest.mark.parametrize("wrap", [True, False])
def test_model_rollouts_agree_with_the_renderer_token_by_token(tiny_model, vocab, wrap):
    trajs = rollout_batch(tiny_model, tasks_for("train")[:4], seed=1, wrap_obs=wrap)
    for k, tr in enumerate(trajs):
        ids, owners, reward, outcome = _replay(tr, episode_seed(1, k), vocab, wrap)
        assert tuple(ids) == tr.ids_T and tuple(owners) == tr.owners_T
        assert reward == tr.reward and outcome == tr.outcome
        assert all(tr.owners_T[i] == POLICY for s, e in tr.calls for i in range(s, e))


@pytest.mark.parametrize("policy", ["oracle", "random", "unskilled", "search", "hardcode"])
@pytest.mark.parametrize("wrap", [True, False])
def test_scripted_rollouts_agree_with_the_renderer_token_by_token(vocab, policy, wrap):
    for k, task in enumerate(tasks_for("train")[::3]):
        tr = scripted_rollout(policy, task, seed=k, wrap_obs=wrap)
        ids, owners, reward, outcome = _replay(tr, k, vocab, wrap)
        assert (tuple(ids), tuple(owners)) == (tr.ids_T, tr.owners_T), (policy, task.name)
        assert reward == tr.reward and outcome == tr.outcome and set(tr.logprobs_T) == {0.0}


def test_demonstrations_agree_with_the_renderer_token_by_token(vocab):
    demos = oracle_demos()
    assert len(demos) == len(tasks_for("train")) and all(t.passed for t in demos)
    for tr in demos:
        ids, owners, _, outcome = _replay(tr, 0, vocab)
        assert (tuple(ids), tuple(owners), outcome) == (tr.ids_T, tr.owners_T, tr.outcome)


def test_a_full_context_ends_the_episode_as_a_truncation(vocab):
    task = get_task("sum_list")
    tr = scripted_rollout("oracle", task, seed=0, block_size=20)  # the listing does not fit
    assert len(tr.calls) == 1 and len(tr) == 7
    out = tr.outcome
    assert out.truncated and not out.submitted and out.turns == 1 < BugFixConfig().max_turns
    assert tr.reward == 0.0 and scripted_rollout("oracle", task, seed=0, block_size=60).passed


def test_untrained_model_emits_malformed_calls_and_earns_nothing(tiny_model):
    trajs = rollout_batch(tiny_model, tasks_for("train"), seed=0)
    malformed = sum(t.outcome.malformed for t in trajs) / len(trajs)
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


def test_a_forced_opening_is_the_first_call_and_the_rest_is_sampled(tiny_model):
    """Problem 29's probe: the opening is played (log-prob 0) and answered exactly as a
    scripted `test` is; what follows is the model's own sampling, its log-probs recomputable."""
    from arl.rollout import renderer_of

    tasks = tasks_for("train")[:5]
    trajs = rollout_batch(tiny_model, tasks, seed=5, opening=["test"])
    renderer = renderer_of(tiny_model)

    def opens_with_test(history, rng):
        return ["test"] if len(history) == 1 else ["submit"]

    for k, (task, tr) in enumerate(zip(tasks, trajs, strict=True)):
        s, e = tr.calls[0]
        assert renderer.call_text(tr.ids_T[s:e]) == "test"
        assert all(tr.logprobs_T[i] == 0.0 and tr.owners_T[i] == POLICY for i in range(s, e))
        scripted = scripted_rollout(opens_with_test, task, seed=episode_seed(5, k))
        cut = scripted.calls[1][0]  # the issue, the test call and its answer
        assert tr.ids_T[:cut] == scripted.ids_T[:cut]
    batch = collate(trajs)
    logp = token_logprobs(tiny_model, batch)
    sampled = batch.action_mask.bool() & (batch.old_logp != 0)
    assert sampled.sum() > 10
    torch.testing.assert_close(logp[sampled], batch.old_logp[sampled], atol=1e-5, rtol=1e-5)
    # the same seed without an opening samples the first call itself
    free = rollout_batch(tiny_model, tasks, seed=5)
    assert [t.ids_T for t in free] != [t.ids_T for t in trajs]
