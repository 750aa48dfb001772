"""Any environment of the protocol as a `gymnasium.Env` in text: the wrapper and its spaces.

`TextGymnasiumEnv` wraps the environment a subclass names (`environment`, an arl.env
Environment): seeded task sampling, reset options, an ANSI render, and text spaces
(`gymnasium.spaces.Text`) over the characters of the environment's words and the space:

- observation: the words of the latest observation, space-separated, exactly as the
  policy's tokenizer sees them (a word outside the environment's words shows as `<unk>`),
  without the `<obs>` template tokens, which are the renderer's, not the tool's;
- action: the words of one call, space-separated, ending in `<end>`. A call that does not
  parse is a malformed call, answered with an error, as in the environment's own Env.

A subclass may write observations and actions otherwise (`spaces`, `text`, `call`: CodeFix's
are printable text). Every random choice flows from the seeded `np_random`: the task (unless
fixed or chosen in `options`) and the seed handed to the environment's Env. So
`reset(seed=s)` twice gives the same episode, and `reset()` continues the stream.
BugFix's wrapper ("arl/BugFix-v0") is arl.bugfix.gymnasium_env, CodeFix's arl.codefix's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import read_from_shared_memory

from arl.env import Environment, Task
from arl.errors import ArlError
from arl.text import UNK
from arl.types import Observation

MAX_OBS_WORDS = 512  # TinyAgent's block_size: no observation is longer than an episode


class LiveText(spaces.Text):
    """A Text space that `AsyncVectorEnv`'s shared memory carries: Gymnasium 1.x reads a Text
    buffer once, into a tuple of strings, when the vector env is built, so every later
    observation came back blank; here the read is a view decoded when the step returns."""


class SharedTexts(Sequence[str]):
    """The strings in a shared Text buffer, decoded on each read; a deepcopy (what
    AsyncVectorEnv returns, copy=True by default) is a plain tuple."""

    def __init__(self, space: spaces.Text, memory: Any, n: int):
        self.space, self.memory, self.n = space, memory, n

    def _rows(self) -> Any:
        return np.frombuffer(memory_buffer(self.memory), dtype=np.int32).reshape(self.n, -1)

    def __getitem__(self, i: Any) -> Any:
        return tuple(self)[i]

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[str]:
        chars, size = self.space.character_list, len(self.space.character_set)
        return iter(tuple("".join(chars[c] for c in row if c < size) for row in self._rows()))

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return repr(tuple(self))


def memory_buffer(memory: Any) -> Any:
    """The raw buffer of a multiprocessing Array (synchronized or not)."""
    return memory.get_obj() if hasattr(memory, "get_obj") else memory


@read_from_shared_memory.register(LiveText)
def _read_live_text(space: LiveText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


def charset(words: Sequence[str]) -> str:
    """Every character of every word, and the space that separates words."""
    return "".join(sorted({c for w in words for c in w} | {" "}))


def text_space(words: Sequence[str], max_words: int) -> spaces.Text:
    """Space-separated `words`, at most `max_words` of them."""
    longest = max(len(w) for w in words)
    return LiveText(max_length=max_words * (longest + 1), min_length=1, charset=charset(words))


def as_text(words: Sequence[str], known: frozenset[str]) -> str:
    """Words as the policy sees them (words not `known` as <unk>), joined by spaces."""
    return " ".join(w if w in known else UNK for w in words)


def action_words(action: str | Sequence[str]) -> list[str]:
    """An action as words: a string is split on whitespace; a sequence of words is kept."""
    if isinstance(action, str):
        return action.split()
    if isinstance(action, Sequence) and all(isinstance(w, str) for w in action):
        return list(action)
    raise ArlError(f"action: expected a string of words, got {type(action).__name__}")


class TextGymnasiumEnv(gym.Env[str, str]):
    """An environment of the protocol as a gymnasium.Env: text spaces, seeded task sampling,
    an ANSI render.

    A subclass names the environment it wraps (`environment`), the reset options it takes
    (besides task and split, those its Env's reset reads as names) and, where they differ from
    the environment's words, how an observation and an action are written (arl.codefix's).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    environment: Environment  # set by each subclass
    reset_options: tuple[str, ...] = ("task", "split")

    def __init__(
        self,
        task: str | None = None,
        split: str = "train",
        env_config: Any = None,
        render_mode: str | None = None,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ArlError(f"render_mode: unknown {render_mode!r} (choose from ansi)")
        self.split = self._check_split(split)
        self.fixed_task = self.environment.get_task(task) if task is not None else None
        self.env_config = env_config or self.environment.default_config()
        self.render_mode = render_mode
        self.observation_space, self.action_space = self.spaces()
        self._env: Any = None
        self._lines: list[str] = []
        self._known: frozenset[str] | None = None

    def known(self) -> frozenset[str]:
        """The environment's words (what an observation shows as itself, not <unk>)."""
        if self._known is None:
            self._known = frozenset(self.environment.words())
        return self._known

    def spaces(self) -> tuple[spaces.Text, spaces.Text]:
        """(observation space, action space): the environment's words, space-separated."""
        words = self.environment.words()
        return text_space(words, MAX_OBS_WORDS), text_space(words, self.env_config.max_call_tokens)

    def text(self, obs: Observation) -> str:
        """An observation as this wrapper shows it: the words the policy's vocabulary keeps."""
        return as_text(obs.words, self.known())

    def call(self, action: str | Sequence[str]) -> Any:
        """An action as the environment's call: its words."""
        return action_words(action)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw a task (or take options["task"]), then start an episode of the environment on it.

        options: task (a name), split ("train" or "heldout": where a task is drawn from), and
        the names the environment's reset takes (BugFix: accumulator; default: drawn from the
        seed).
        """
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - set(self.reset_options))
        if unknown:
            raise ArlError(
                f"reset options: unknown {unknown[0]!r} (choose from "
                f"{', '.join(self.reset_options)})"
            )
        task = self._choose_task(options.pop("task", None), options.pop("split", None))
        env_seed = int(self.np_random.integers(2**31 - 1))
        self._env = self.environment.make(task, self.env_config)
        names = {k: v for k, v in options.items() if v}  # the episode's names, if chosen
        prompt, info = self._env.reset(seed=env_seed, options=names or None)
        obs = self.text(prompt)
        self._lines = [obs]
        return obs, {**info, "split": task.split}

    def _choose_task(self, name: str | None, split: str | None) -> Task:
        """The named task, the fixed one, or one drawn uniformly from the split by np_random."""
        if name is not None:
            task = self.environment.get_task(name)
            if split is not None and task.split != self._check_split(split):
                raise ArlError(
                    f"reset options: task {name!r} is in split {task.split!r}, not {split!r}"
                )
            return task
        if self.fixed_task is not None and split is None:
            return self.fixed_task
        pool = self.environment.tasks(self._check_split(split) if split is not None else self.split)
        return pool[int(self.np_random.integers(len(pool)))]

    def step(self, action: str | Sequence[str]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One call: the Env's step on the action; the reward is a Python float (+0.0)."""
        if self._env is None:
            raise RuntimeError("step() called before reset()")
        call = self.call(action)
        out, reward, terminated, truncated, outcome = self._env.step(call)
        obs = self.text(out)
        self._lines.append(call.text if hasattr(call, "text") else " ".join(call))
        self._lines.append(f"  <obs> {obs} </obs>")
        if outcome is not None:
            verdict = "passed" if outcome.hidden_pass else "failed"
            self._lines.append(f"reward {outcome.score:.2f}, hidden tests {verdict}")
        info = outcome.as_dict() if outcome is not None else {}
        return obs, float(reward) + 0.0, bool(terminated), bool(truncated), info

    def _check_split(self, split: str) -> str:
        splits = self.environment.splits
        if split not in splits:
            raise ArlError(f"split: unknown {split!r} (choose from {', '.join(splits)})")
        return split

    def render(self) -> str | None:
        """render_mode "ansi": the episode so far, one call and its observation per line."""
        if self.render_mode != "ansi":
            return None
        return "\n".join(self._lines) + "\n"
