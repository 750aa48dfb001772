"""Rollouts -> Trajectory, token in and token out.

`rollout_batch` advances many episodes together: every loop iteration appends to
each row of one KV cache what that row has pending (its last sampled token, or
that token plus a whole observation), samples one token per unfinished row, and
steps the environment of each row whose call just ended. The Trajectory keeps the
sampled ids as sampled; observations are tokenized once, by the renderer. Every
episode, a model's or a scripted policy's (`scripted_rollout`, the demonstrations),
grows one `arl.text.Transcript` the same way.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from arl.gym.env import BugFixEnv, EnvConfig
from arl.gym.grammar import END
from arl.gym.policies import ScriptedPolicy, get_scripted
from arl.gym.tasks import Task
from arl.model import TinyAgent
from arl.sampling import sample
from arl.text import Transcript, Vocab, default_vocab
from arl.types import Outcome, Trajectory


def episode_seed(seed: int, k: int) -> int:
    """The seed of the k-th episode of a run seeded with `seed`."""
    return (seed * 1_000_003 + k * 7_919) % (2**31 - 1)


@dataclass
class _Episode:
    """One episode while it is being rolled out: its environment and its transcript."""

    env: BugFixEnv
    transcript: Transcript
    reward: float = 0.0
    outcome: Outcome | None = None

    def trajectory(self) -> Trajectory:
        tr = self.transcript
        return Trajectory(
            task=self.env.task.name,
            ids_T=tuple(tr.ids),
            owners_T=tuple(tr.owners),
            logprobs_T=tuple(tr.logps),
            calls=tuple(tr.calls),
            reward=self.reward,
            outcome=self.outcome,
        )


def _new_episode(task: Task, config: EnvConfig, seed: int, vocab: Vocab, wrap: bool) -> _Episode:
    env = BugFixEnv(task, config)
    env.reset(seed=seed)
    return _Episode(env, Transcript.begin(task.name, vocab, wrap))


def _after_call(ep: _Episode, n: int, block: int) -> list[str] | None:
    """Close the call of the last `n` tokens and step the env on it; the observation's words
    as the policy reads them, or None once the episode is over (the env's end, or the context
    full: no room for the observation and one more call)."""
    obs, reward, terminated, truncated, outcome = ep.env.step(ep.transcript.end_call(n))
    ep.reward += reward
    if outcome is not None:
        ep.outcome = outcome
        return None
    seen = ep.transcript.observe(obs, limit=block - ep.env.config.max_call_tokens)
    if seen is None:  # the context is full: end it here
        ep.outcome = ep.env.cut()
        ep.reward += ep.outcome.score
    return seen


def scripted_rollout(
    policy: ScriptedPolicy | str,
    task: Task,
    *,
    seed: int = 0,
    env_config: EnvConfig | None = None,
    vocab: Vocab | None = None,
    wrap_obs: bool = True,
    block_size: int = 512,
) -> Trajectory:
    """One episode of a scripted policy, rendered exactly as a model rollout would be: the
    policy reads what a model reads (the issue and each observation through the vocabulary)."""
    policy = get_scripted(policy) if isinstance(policy, str) else policy
    vocab, config = vocab or default_vocab(), env_config or EnvConfig()
    rng = random.Random(seed)
    ep = _new_episode(task, config, seed, vocab, wrap_obs)
    history: list[list[str]] = [vocab.decode(ep.transcript.ids)]  # the issue
    while ep.outcome is None:
        call_ids = vocab.encode(policy(history, rng)[: config.max_call_tokens])
        for token in call_ids:
            ep.transcript.act(token)
        seen = _after_call(ep, len(call_ids), block_size)
        if seen is not None:
            history.append(seen)
    return ep.trajectory()


@torch.inference_mode()
def rollout_batch(
    model: TinyAgent,
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
    vocab, config = vocab or default_vocab(), env_config or EnvConfig()
    block = model.config.block_size
    device = model.lm_head.weight.device
    gen = torch.Generator().manual_seed(seed)
    eps = [_new_episode(t, config, episode_seed(seed, k), vocab, wrap_obs)
           for k, t in enumerate(tasks)]  # fmt: skip
    B = len(eps)
    pending: list[list[int]] = [list(ep.transcript.ids) for ep in eps]
    call_len = [0] * B  # tokens of each row's open call
    cache = model.new_cache(B) if use_cache else None
    was_training = model.training
    model.eval()
    end_id = vocab.id(END)
    while True:
        live = [b for b in range(B) if eps[b].outcome is None]
        if not live:
            break
        if cache is not None:  # feed what each row has pending; logits after its last token
            S = max(len(p) for p in pending)
            ids = torch.tensor([p + [0] * (S - len(p)) for p in pending])  # (B, S), one copy
            n_new = torch.tensor([len(p) for p in pending])  # (B,)
            logits = model.extend(ids.to(device), n_new.to(device), cache)  # (B, V)
        else:  # recompute every row's whole prefix: the baseline the cache is measured against
            rows = [ep.transcript.ids for ep in eps]
            L = max(len(r) for r in rows)
            ids = torch.tensor([r + [0] * (L - len(r)) for r in rows])  # (B, L)
            full, _ = model(ids.to(device))  # (B, L, V)
            last = torch.tensor([len(r) - 1 for r in rows])
            logits = full[torch.arange(B), last]  # (B, V)
        if len(live) < B:
            logits = logits[live]
        tok, logp = sample(logits.cpu(), temperature, top_p, gen)  # (n_live,), (n_live,)
        pending = [[] for _ in eps]
        for b, t, lp in zip(live, tok.tolist(), logp.tolist(), strict=True):
            ep = eps[b]
            ep.transcript.act(t, lp)
            call_len[b] += 1
            pending[b] = [t]
            if t == end_id or call_len[b] == config.max_call_tokens:
                n, call_len[b] = call_len[b], 0
                over = _after_call(ep, n, block) is None
                # next: the call's last token and the observation after it; nothing once over
                pending[b] = [] if over else ep.transcript.ids[ep.transcript.calls[-1][1] - 1 :]
    model.train(was_training)
    return [ep.trajectory() for ep in eps]
