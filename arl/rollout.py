"""Rollouts -> Trajectory, token in and token out.

`rollout_batch` advances many episodes together: every loop iteration appends to
each row of one KV cache what that row has pending (its last sampled token, or
that token plus a whole observation), samples one token per unfinished row, and
steps the environment of each row whose call just ended. The Trajectory keeps the
sampled ids as sampled; observations are tokenized once, by the renderer.
Scripted policies go through the same renderer (`scripted_rollout`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from arl.gym.env import BugFixEnv, EnvConfig
from arl.gym.policies import ScriptedPolicy, get_scripted
from arl.gym.tasks import Task
from arl.model import TinyAgent
from arl.sampling import sample
from arl.text import END, Vocab, default_vocab, render_observation, render_prompt
from arl.types import POLICY, Trajectory


@dataclass(frozen=True)
class WordCodec:
    """TinyAgent's rendering: the gym's words, one id each (see arl/text.py).

    A codec is what a rollout needs of a policy's tokenizer: `start` renders the prompt,
    `words` turns a sampled call into the gym's words, `observe` renders what follows a
    call; `state` is whatever the codec carries between turns (a chat's messages).
    arl.hf.chat.ChatCodec is the other one.
    """

    vocab: Vocab

    @property
    def end_id(self) -> int:
        return self.vocab.id(END)

    def call_limit(self, config: EnvConfig) -> int:
        return config.max_call_tokens

    def start(self, task_name: str) -> tuple[list[int], list[int], object]:
        ids, owners = render_prompt(task_name, self.vocab)
        return ids, owners, None

    def encode_call(self, words: Sequence[str]) -> list[int]:
        return self.vocab.encode(words)

    def words(self, call_ids: Sequence[int]) -> list[str]:
        return self.vocab.decode(call_ids)

    def observe(self, state, call_ids, obs, wrap: bool) -> tuple[list[int], list[int], object]:
        ids, owners = render_observation(obs, self.vocab, wrap)
        return ids, owners, state


def codec_of(model, vocab: Vocab | None = None):
    """The model's own codec (a real model's chat), else TinyAgent's words."""
    return getattr(model, "codec", None) or WordCodec(vocab or default_vocab())


def episode_seed(seed: int, k: int) -> int:
    """The seed of the k-th episode of a run seeded with `seed`."""
    return (seed * 1_000_003 + k * 7_919) % (2**31 - 1)


@dataclass
class _Episode:
    """Mutable state of one episode while it is being rolled out."""

    env: BugFixEnv
    ids: list[int]
    owners: list[int]
    logps: list[float]
    calls: list[tuple[int, int]] = field(default_factory=list)
    reward: float = 0.0
    info: dict | None = None
    state: object = None  # the codec's state between turns
    seen: list[list[str]] = field(default_factory=list)  # the prompt's and observations' words

    def add(self, ids: Sequence[int], owners: Sequence[int]) -> None:
        self.ids += ids
        self.owners += owners
        self.logps += [0.0] * len(ids)

    def trajectory(self) -> Trajectory:
        return Trajectory(
            task=self.env.task.name,
            ids_T=tuple(self.ids),
            owners_T=tuple(self.owners),
            logprobs_T=tuple(self.logps),
            calls=tuple(self.calls),
            reward=self.reward,
            info=dict(self.info or {}),
        )


def _new_episode(task: Task, config: EnvConfig, seed: int, codec) -> _Episode:
    env = BugFixEnv(task, config)
    prompt, _ = env.reset(seed=seed)
    ids, owners, state = codec.start(task.name)
    return _Episode(env, list(ids), list(owners), [0.0] * len(ids), state=state, seen=[prompt])


def _after_call(ep: _Episode, call_ids: list[int], codec, wrap: bool, room: int) -> list[int]:
    """Step the env on a finished call; returns the observation ids to feed next ([] if done)."""
    obs, reward, terminated, truncated, info = ep.env.step(codec.words(call_ids))
    ep.reward += reward
    ep.calls.append((len(ep.ids) - len(call_ids), len(ep.ids)))
    if terminated or truncated:
        ep.info = info
        return []
    o_ids, o_owners, state = codec.observe(ep.state, call_ids, obs, wrap)
    if len(o_ids) + codec.call_limit(ep.env.config) > room:  # the context is full: end it here
        ep.info = ep.env.outcome(submitted=False) | {"context_full": True}
        ep.reward += ep.info["score"]
        return []
    ep.add(o_ids, o_owners)
    ep.state = state
    ep.seen.append(list(obs))
    return o_ids


def scripted_rollout(
    policy: ScriptedPolicy | str,
    task: Task,
    *,
    seed: int = 0,
    env_config: EnvConfig | None = None,
    vocab: Vocab | None = None,
    wrap_obs: bool = True,
    block_size: int = 512,
    codec=None,
) -> Trajectory:
    """One episode of a scripted policy, rendered exactly as a model rollout would be
    (`codec`: a real model's chat rendering; default TinyAgent's words)."""
    policy = get_scripted(policy) if isinstance(policy, str) else policy
    codec, config = codec or WordCodec(vocab or default_vocab()), env_config or EnvConfig()
    rng = random.Random(seed)
    ep = _new_episode(task, config, seed, codec)
    while ep.info is None:
        words = policy(ep.seen, rng)[: config.max_call_tokens]
        call_ids = codec.encode_call(words)[: codec.call_limit(config)]
        ep.ids += call_ids
        ep.owners += [POLICY] * len(call_ids)
        ep.logps += [0.0] * len(call_ids)
        _after_call(ep, call_ids, codec, wrap_obs, block_size - len(ep.ids))
    return ep.trajectory()


@torch.inference_mode()
def rollout_batch(
    model: TinyAgent,  # or any policy with forward / new_cache / extend (arl.hf.HFPolicy)
    tasks: Sequence[Task],
    *,
    seed: int = 0,
    env_config: EnvConfig | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    vocab: Vocab | None = None,
    wrap_obs: bool = True,
    use_cache: bool = True,
) -> list[Trajectory]:
    """Roll out one episode per task, all in one batched decode. Same seed, same ids."""
    codec, config = codec_of(model, vocab), env_config or EnvConfig()
    limit = codec.call_limit(config)
    block = model.config.block_size
    device = model.lm_head.weight.device
    gen = torch.Generator().manual_seed(seed)
    eps = [_new_episode(t, config, episode_seed(seed, k), codec) for k, t in enumerate(tasks)]
    B = len(eps)
    pending: list[list[int]] = [list(ep.ids) for ep in eps]
    call_buf: list[list[int]] = [[] for _ in eps]
    cache = model.new_cache(B) if use_cache else None
    was_training = model.training
    model.eval()
    end_id = codec.end_id
    while True:
        live = [b for b in range(B) if eps[b].info is None]
        if not live:
            break
        if cache is not None:  # feed what each row has pending; logits after its last token
            S = max(len(p) for p in pending)
            ids = torch.tensor([p + [0] * (S - len(p)) for p in pending])  # (B, S), one copy
            n_new = torch.tensor([len(p) for p in pending])  # (B,)
            logits = model.extend(ids.to(device), n_new.to(device), cache)  # (B, V)
        else:  # recompute every row's whole prefix: the baseline the cache is measured against
            L = max(len(ep.ids) for ep in eps)
            ids = torch.tensor([ep.ids + [0] * (L - len(ep.ids)) for ep in eps])  # (B, L)
            full, _ = model(ids.to(device))  # (B, L, V)
            last = torch.tensor([len(ep.ids) - 1 for ep in eps])
            logits = full[torch.arange(B), last]  # (B, V)
        if len(live) < B:
            logits = logits[live]
        tok, logp = sample(logits.cpu(), temperature, top_p, gen)  # (n_live,), (n_live,)
        pending = [[] for _ in eps]
        for b, t, lp in zip(live, tok.tolist(), logp.tolist(), strict=True):
            ep = eps[b]
            ep.ids.append(t)
            ep.owners.append(POLICY)
            ep.logps.append(lp)
            call_buf[b].append(t)
            if t == end_id or len(call_buf[b]) == limit:
                obs_ids = _after_call(ep, call_buf[b], codec, wrap_obs, block - len(ep.ids))
                pending[b] = [t] + obs_ids if obs_ids else []
                call_buf[b] = []
            else:
                pending[b] = [t]
    model.train(was_training)
    return [ep.trajectory() for ep in eps]
