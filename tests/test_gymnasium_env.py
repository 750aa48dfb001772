"""The BugFix gym as a gymnasium.Env: check_env over every task, seeding, options, render."""

import random
import warnings

import pytest

gym = pytest.importorskip("gymnasium")
from gymnasium.utils.env_checker import check_env  # noqa: E402

import arl  # noqa: E402,F401  (registers arl/BugFix-v0)
from arl.bugfix.env import BugFixEnv, BugFixOutcome  # noqa: E402
from arl.bugfix.environment import BUGFIX  # noqa: E402
from arl.bugfix.gymnasium_env import (  # noqa: E402
    ENV_ID,
    BugFixGymnasiumEnv,
    as_text,
    charset,
    text_space,
)
from arl.bugfix.tasks import all_tasks, get_task, tasks_for  # noqa: E402
from arl.envkit.families import ACCUMULATORS  # noqa: E402
from arl.errors import ArlError  # noqa: E402


def _checked(env) -> None:
    """check_env with every Gymnasium warning turned into a failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env)


def test_registered_on_import_and_passes_check_env():
    env = gym.make(ENV_ID)
    assert env.spec.id == "arl/BugFix-v0"
    assert isinstance(env.unwrapped, BugFixGymnasiumEnv)
    _checked(env.unwrapped)  # spec set by make: the ansi render mode is checked too


@pytest.mark.parametrize("task", [t.name for t in all_tasks()])
def test_check_env_on_every_task(task):
    _checked(gym.make(ENV_ID, task=task, render_mode="ansi").unwrapped)


def _play(env, policy: str, seed: int, options=None):
    """Drive the gymnasium env with a scripted policy's words; the final (reward, info)."""
    obs, info = env.reset(seed=seed, options=options)
    history, rng = [obs.split()], random.Random(seed)
    while True:
        obs, reward, terminated, truncated, info = env.step(
            " ".join(BUGFIX.scripted(policy)(history, rng))
        )
        assert obs in env.observation_space
        history.append(obs.split())
        if terminated or truncated:
            return reward, info


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_oracle_passes_every_task_through_the_wrapper(split):
    env = BugFixGymnasiumEnv(split=split)
    for task in tasks_for(split):
        reward, info = _play(env, "oracle", seed=1, options={"task": task.name})
        assert (reward, info["hidden_pass"], info["task"]) == (1.0, True, task.name)


def test_observations_are_bugfixenv_words_joined():
    task = all_tasks()[0]
    env = BugFixGymnasiumEnv(task=task.name)
    obs, info = env.reset(seed=3)
    raw = BugFixEnv(task)
    prompt, raw_info = raw.reset(options={"accumulator": info["accumulator"]})
    assert obs == " ".join(prompt.words)
    for action in ("read <end>", "test <end>"):
        assert env.step(action)[0] == " ".join(raw.step(action.split())[0].words)


def test_seed_fixes_task_and_accumulator_and_draws_vary():
    env = BugFixGymnasiumEnv(split="heldout")
    a = env.reset(seed=7)
    assert env.reset(seed=7) == a
    draws = {env.reset(seed=s)[1]["task"] for s in range(40)}
    assert draws <= {t.name for t in tasks_for("heldout")} and len(draws) > 3
    env.reset(seed=7)
    follow_1 = [env.reset()[1] for _ in range(5)]
    env.reset(seed=7)
    assert [env.reset()[1] for _ in range(5)] == follow_1  # unseeded resets continue the stream


def test_reset_options_choose_task_split_and_accumulator():
    env = BugFixGymnasiumEnv()
    heldout = tasks_for("heldout")[0].name
    obs, info = env.reset(seed=0, options={"task": heldout, "accumulator": "score"})
    assert (info["task"], info["split"], info["accumulator"]) == (heldout, "heldout", "score")
    assert env.reset(seed=0, options={"split": "heldout"})[1]["split"] == "heldout"
    init = next(t.name for t in all_tasks() if t.family == "init")
    named = {
        env.reset(seed=s, options={"task": init, "accumulator": "acc"})[1]["accumulator"]
        for s in range(6)
    }
    assert named == {"acc"}
    drawn = {env.reset(seed=s, options={"task": init})[1]["accumulator"] for s in range(40)}
    assert drawn == set(ACCUMULATORS)
    with pytest.raises(ArlError, match="unknown 'colour'"):
        env.reset(options={"colour": 1})
    with pytest.raises(ArlError, match="not 'train'"):
        env.reset(options={"task": heldout, "split": "train"})
    with pytest.raises(ArlError, match="accumulator"):
        env.reset(options={"accumulator": "bogus"})
    with pytest.raises(ArlError, match="split"):
        BugFixGymnasiumEnv(split="test")


def test_render_ansi_shows_the_episode_so_far():
    env = gym.make(ENV_ID, render_mode="ansi")
    env.reset(seed=0, options={"task": "handle_entries", "accumulator": "tally"})
    assert env.render() == "<bos> fix handle _ entries\n"
    env.step("edit div <end>")
    env.step("edit div <end>")
    env.step("submit <end>")
    assert env.render().splitlines()[1:] == [
        "edit div <end>",
        "  <obs> ok </obs>",
        "edit div <end>",
        "  <obs> error edit_used </obs>",
        "submit <end>",
        "  <obs> submitted </obs>",
        "reward 1.00, hidden tests passed",
    ]
    assert gym.make(ENV_ID).unwrapped.render() is None  # no render_mode: nothing rendered


def test_malformed_and_out_of_vocabulary_words_stay_in_the_spaces():
    env = BugFixGymnasiumEnv(task="handle_entries")
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step("frobnicate")
    assert obs == "error malformed unterminated" and obs in env.observation_space
    assert env.step(["read", "<end>"])[0].startswith("def handle")  # a list of words works too
    assert "edit init total <end>" in env.action_space
    with pytest.raises(ArlError, match="action"):
        env.step(3)


def test_truncated_after_max_turns_not_terminated():
    env = BugFixGymnasiumEnv(task="handle_entries")
    env.reset(seed=0)
    outs = [env.step("test <end>") for _ in range(6)]
    assert [o[2:4] for o in outs] == [(False, False)] * 5 + [(False, True)]
    assert outs[-1][1] == 0.0 and outs[-1][4]["truncated"]


def test_spaces_built_from_the_gyms_words_cover_the_policys_vocabulary(vocab):
    chars = "".join(sorted({c for w in vocab.words for c in w} | {" "}))
    assert charset() == chars  # the renderer's own words add no character
    assert text_space(1).max_length == max(len(w) for w in vocab.words) + 1
    assert as_text(["ok", "<obs>", "never-a-word"]) == "ok <unk> <unk>"  # <obs> is not the env's


def test_the_final_info_is_the_outcome_as_a_dict():
    env = BugFixGymnasiumEnv(task="handle_entries")
    env.reset(seed=0)
    assert env.step("read <end>")[4] == {}
    info = env.step("submit <end>")[4]
    assert list(info)[:3] == ["task", "split", "score"] and info["submitted"]
    assert info["family"] == get_task("handle_entries").family
    assert BugFixOutcome(**info).as_dict() == info


# --- vectorized: Gymnasium's async vector env with its shared memory -------------------------

CODEFIX_CALLS = ("read", "test")


@pytest.mark.parametrize(
    "env_id, calls",
    [(ENV_ID, ("read <end>", "test <end>")), ("arl/CodeFix-v0", CODEFIX_CALLS)],
)
def test_async_vector_env_with_shared_memory_returns_the_sync_observations(env_id, calls):
    """Gymnasium 1.x read a Text space's shared buffer once, when the vector env was built: its
    observations came back blank. LiveText's read decodes the buffer when a step returns."""
    import arl.codefix.gymnasium_env  # noqa: F401  (registers arl/CodeFix-v0)

    seen = {}
    for mode in ("sync", "async"):  # async: shared memory, Gymnasium's default
        envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode)
        try:
            obs, _ = envs.reset(seed=3)
            first = tuple(obs)
            obs, reward, *_ = envs.step(calls)
            second = tuple(obs)
            obs, _, *_ = envs.step(calls[::-1])
            seen[mode] = (first, second, tuple(obs), tuple(reward))
        finally:
            envs.close()
    assert seen["async"] == seen["sync"]
    first, second, third, _ = seen["async"]
    assert all(o.strip() for o in first + second + third)  # nothing blank
    assert first != second != third  # each step's own observations, not the first's again
    assert len(set(second)) == 2  # each env its own answer (a listing, a test report)
