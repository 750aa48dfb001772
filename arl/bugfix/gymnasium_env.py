"""The BugFix gym as a `gymnasium.Env` ("arl/BugFix-v0"), wrapping arl.bugfix.env.BugFixEnv.

The wrapper, its text spaces and its shared-memory Text are any environment's
(arl.envkit.gymnasium_env); BugFix's are over the characters of the gym's words and the space:

- observation: the words of the latest observation, space-separated, exactly as the
  policy's tokenizer sees them (a word outside the vocabulary shows as `<unk>`): the
  issue after `reset` (`<bos> fix handle _ entries`), then each tool's output
  (`passed 0 of 3`, a listing, `ok`, `error malformed unterminated`, `submitted`),
  without the `<obs>` template tokens, which are the renderer's, not the tool's;
- action: the words of one call, space-separated, ending in `<end>` (`edit init total
  <end>`). A call that does not parse is a malformed call, answered with an error, as
  in BugFixEnv.

Every random choice flows from the seeded `np_random`: the task (unless fixed or chosen
in `options`) and the seed handed to BugFixEnv, which names the accumulator. So
`reset(seed=s)` twice gives the same episode, and `reset()` continues the stream.

    import gymnasium as gym, arl
    env = gym.make("arl/BugFix-v0", split="heldout", render_mode="ansi")
    obs, info = env.reset(seed=0, options={"task": "handle_entries", "accumulator": "tally"})
    obs, reward, terminated, truncated, info = env.step("read <end>")
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import gymnasium as gym
from gymnasium import spaces

from arl.bugfix.environment import BUGFIX
from arl.bugfix.tasks import gym_words
from arl.envkit import gymnasium_env as text_env
from arl.envkit.gymnasium_env import (  # noqa: F401 (arl.gym.gymnasium_env's names, kept)
    MAX_OBS_WORDS,
    LiveText,
    SharedTexts,
    TextGymnasiumEnv,
    action_words,
    memory_buffer,
)

ENV_ID = BUGFIX.gymnasium.id  # "arl/BugFix-v0"
RESET_OPTIONS = ("task", "split", "accumulator")


def charset() -> str:
    """Every character of every word of the gym, and the space that separates words."""
    return text_env.charset(gym_words())


def text_space(max_words: int) -> spaces.Text:
    """Space-separated words of the gym, at most `max_words` of them."""
    return text_env.text_space(gym_words(), max_words)


def as_text(words: Sequence[str]) -> str:
    """Words as the policy sees them (words the gym does not know as <unk>), joined by spaces."""
    return text_env.as_text(words, _known())


@cache
def _known() -> frozenset[str]:
    return frozenset(gym_words())


class BugFixGymnasiumEnv(TextGymnasiumEnv):
    """BugFixEnv as a gymnasium.Env: text spaces, seeded task sampling, an ANSI render.

    reset options: task (a name), split ("train" or "heldout": where a task is drawn from),
    accumulator (one of arl.envkit.families.ACCUMULATORS; default: drawn from the seed).
    """

    environment = BUGFIX
    reset_options = RESET_OPTIONS


def register() -> None:
    """Register "arl/BugFix-v0" with Gymnasium, once (`import arl` does the same, lazily)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=BUGFIX.gymnasium.entry_point)
