"""SQLFix as a `gymnasium.Env` ("arl/SQLFix-v0"): text in, text out, as a real model sees it.

Observations are the tools' text (the issue after `reset`, the query, the schema, rows or an
error, edit answers); an action is one call's text (`show`, `run`, `replace age > 30 => age
>= 30`, `submit`). Reset options: task, split. Written against gymnasium alone and arl's
protocol (arl.env), not by subclassing BugFix's wrapper (arl.gym.gymnasium_env).

    import gymnasium as gym, sqlfix.environment
    env = gym.make("arl/SQLFix-v0", split="train")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("show")
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from arl.types import TextCall
from sqlfix.environment import SQLFIX
from sqlfix.tasks import SPLITS

MAX_CHARS = 4096  # no observation or call of SQLFix comes near this; longer text is cut
RESET_OPTIONS = ("task", "split")


class SQLFixGymnasiumEnv(gym.Env[str, str]):
    """SQLFixEnv as a gymnasium.Env: printable text both ways, seeded task sampling."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        task: str | None = None,
        split: str = "train",
        env_config: Any = None,
        render_mode: str | None = None,
    ):
        if split not in SPLITS:
            raise ValueError(f"split: unknown {split!r} (choose from {', '.join(SPLITS)})")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode: unknown {render_mode!r} (choose from ansi)")
        self.split, self.render_mode = split, render_mode
        self.fixed_task = SQLFIX.get_task(task) if task is not None else None
        self.env_config = env_config or SQLFIX.default_config()
        text = spaces.Text(max_length=MAX_CHARS, min_length=1, charset=string.printable)
        self.observation_space, self.action_space = text, text
        self._env: Any = None
        self._lines: list[str] = []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"reset options: unknown {unknown[0]!r}")
        name, split = options.get("task"), options.get("split", self.split)
        if name is not None:
            task = SQLFIX.get_task(name)
        elif self.fixed_task is not None and "split" not in options:
            task = self.fixed_task
        else:
            pool = SQLFIX.tasks(split)
            task = pool[int(self.np_random.integers(len(pool)))]
        self._env = SQLFIX.make(task, self.env_config)
        prompt, info = self._env.reset(seed=int(self.np_random.integers(2**31 - 1)))
        obs = _fit(prompt.text)
        self._lines = [obs]
        return obs, {**info, "split": task.split}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._env is None:
            raise RuntimeError("step() called before reset()")
        if not isinstance(action, str):
            raise TypeError(f"action: expected a call's text, got {type(action).__name__}")
        out, reward, terminated, truncated, outcome = self._env.step(TextCall(action, True))
        obs = _fit(out.text)
        self._lines += [action, f"  -> {obs}"]
        info = outcome.as_dict() if outcome is not None else {}
        return obs, float(reward) + 0.0, bool(terminated), bool(truncated), info

    def render(self) -> str | None:
        return "\n".join(self._lines) + "\n" if self.render_mode == "ansi" else None


def _fit(text: str) -> str:
    """Text inside the observation space: printable, 1..MAX_CHARS characters."""
    kept = "".join(c if c in string.printable else "?" for c in text)[:MAX_CHARS]
    return kept or " "
