"""CodeFix as a `gymnasium.Env` ("arl/CodeFix-v0"): text in, text out, as a real model sees it.

Observations are the tools' text: the issue after `reset` ("fix NAME"), the module as it is
after `read`, per-test results after `test`, edit answers. An action is one call's text:
`read`, `test`, `submit`, or a SEARCH/REPLACE block (arl.codefix.grammar). Reset options: task,
split, accumulator, list_name. Policy code runs only in the sandbox, as in every CodeFix episode.

    import gymnasium as gym, arl
    env = gym.make("arl/CodeFix-v0", split="train", render_mode="ansi")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("read")
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from gymnasium import spaces

from arl.codefix.environment import CODEFIX
from arl.envkit.gymnasium_env import LiveText, TextGymnasiumEnv
from arl.errors import ArlError
from arl.types import Observation, TextCall

ENV_ID = CODEFIX.gymnasium.id  # "arl/CodeFix-v0"
MAX_CHARS = 16_384  # no module, test report or call of CodeFix comes near this


class CodeFixGymnasiumEnv(TextGymnasiumEnv):
    """CodeFixEnv as a gymnasium.Env: printable text both ways."""

    environment = CODEFIX
    reset_options = ("task", "split", "accumulator", "list_name")

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
