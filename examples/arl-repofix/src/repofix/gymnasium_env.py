"""RepoFix as a `gymnasium.Env` ("arl/RepoFix-v0"): text in, text out, as a real model sees it.

Observations are the tools' text (the issue after `reset`, the file list, grep's hits, a file
with its line numbers, test results, edit answers); an action is one call's text (`ls`,
`grep def total`, `read stats/basic.py`, `replace stats/basic.py 2 acc = 0`, `test`,
`submit`). Reset options: task, split. The repository's code runs only in arl's sandbox.

    import gymnasium as gym, repofix.environment
    env = gym.make("arl/RepoFix-v0", split="train")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("ls")
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from gymnasium import spaces

from arl.envkit.gymnasium_env import LiveText, TextGymnasiumEnv
from arl.errors import ArlError
from arl.types import Observation, TextCall
from repofix.environment import REPOFIX

MAX_CHARS = 16_384  # no file, answer or call of RepoFix comes near this


class RepoFixGymnasiumEnv(TextGymnasiumEnv):
    """RepoFixEnv as a gymnasium.Env: printable text both ways."""

    environment = REPOFIX
    reset_options = ("task", "split")

    def spaces(self) -> tuple[spaces.Text, spaces.Text]:
        text = LiveText(max_length=MAX_CHARS, min_length=1, charset=string.printable)
        return text, text

    def text(self, obs: Observation) -> str:
        return obs.text

    def call(self, action: str | Sequence[str]) -> TextCall:
        """The action's text, a whole call (a gymnasium action always ends its turn)."""
        if not isinstance(action, str):
            raise ArlError(f"action: expected a call's text, got {type(action).__name__}")
        return TextCall(action, True)
