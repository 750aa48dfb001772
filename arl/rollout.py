"""Rollouts -> Trajectory, token in and token out, on any environment of the protocol (arl.env).

`rollout_batch` advances many episodes together: every loop iteration appends to
each row of one KV cache what that row has pending (its last sampled token, or
that token plus a whole observation), samples one token per unfinished row, and
steps the environment of each row whose call just ended. The Trajectory keeps the
sampled ids as sampled; observations are tokenized once, by the renderer. Every
episode, a model's or a scripted policy's (`scripted_rollout`, the demonstrations),
grows one transcript the same way. The transcript is the policy's renderer's: TinyAgent's
words (`arl.text.Transcript`), or a real model's chat (`arl.hf.chat.ChatTranscript`). The
environment comes from the tasks (`environment_of_tasks`): rollouts know only the protocol.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from arl.env import Env, Environment, ScriptedPolicy, Task, config_for, environment_of_tasks
from arl.env import get_environment as _get_environment
from arl.model import TinyAgent
from arl.progress import report
from arl.sampling import sample
from arl.text import END, Transcript, Vocab, make_vocab
from arl.types import Observation, Outcome, Trajectory


@dataclass(frozen=True)
class WordRenderer:
    """TinyAgent's renderer: an environment's words, one id each (see arl/text.py).

    A renderer is what rollouts need of a policy's tokenizer: a transcript to grow
    (`begin`), the token that ends a call, a call's token budget, and a scripted call's ids.
    """

    vocab: Vocab

    @property
    def end_id(self) -> int:
        return self.vocab.id(END)

    def begin(self, prompt: Observation, wrap: bool = True) -> Transcript:
        return Transcript.begin(prompt.words, self.vocab, wrap)

    def call_limit(self, config) -> int:
        return config.max_call_tokens

    def encode_call(self, words: Sequence[str], env: Env | None = None) -> list[int]:
        return self.vocab.encode(words)

    def call_text(self, ids: Sequence[int]) -> str:
        """A call as text, without its end token: 'edit minmax'."""
        return " ".join(w for w in self.vocab.decode(ids) if w != END)


# a first call forced on every episode: its words, or a function of the reset env giving them
Opening = Sequence[str] | Callable[[Env], Sequence[str]]
REPORT_AFTER_S = 5.0  # a batch decoding longer than this reports its progress


def vocab_of(environment: Environment | str = "bugfix") -> Vocab:
    """The vocabulary a TinyAgent speaks on an environment (its words, after the specials)."""
    env = _get_environment(environment) if isinstance(environment, str) else environment
    return make_vocab(env.words())


def vocab_record(environment: Environment | str) -> dict[str, str]:
    """What a TinyAgent checkpoint records of the environment it speaks: its name and its
    vocabulary's digest (arl.train.policy reads them: `arl export hf`'s default --env, and
    check_vocab's comparison of vocabularies)."""
    env = _get_environment(environment) if isinstance(environment, str) else environment
    return {"env": env.name, "vocab": vocab_of(env).digest()}


def renderer_of(model=None, vocab: Vocab | None = None, environment: Environment | None = None):
    """The policy's own renderer (a real model's chat, told the environment's tool grammar),
    else TinyAgent's words (the environment's vocabulary, BugFix's by default)."""
    chat = getattr(model, "renderer", None)
    if chat is not None:
        return chat.for_environment(environment) if environment is not None else chat
    return WordRenderer(vocab or vocab_of(environment or "bugfix"))


def episode_seed(seed: int, k: int) -> int:
    """The seed of the k-th episode of a run seeded with `seed`."""
    return (seed * 1_000_003 + k * 7_919) % (2**31 - 1)


@dataclass
class _Episode:
    """One episode while it is being rolled out: its environment and its transcript."""

    env: Env
    transcript: Transcript  # or any transcript with the same methods (a chat's)
    prompt: Observation
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
            entropy_T=tr.entropy_T(),
        )


def _new_episode(environment, task: Task, config, seed: int, renderer, wrap: bool) -> _Episode:
    env = environment.make(task, config)
    prompt, _ = env.reset(seed=seed)
    return _Episode(env, renderer.begin(prompt, wrap), prompt)


def _after_call(ep: _Episode, n: int, room: int) -> list[str] | None:
    """Close the call of the last `n` tokens and step the env on it; the observation's words
    as the policy reads them, or None once the episode is over (the env's end, or the context
    full: `room` tokens left for the observation and one more call)."""
    obs, reward, terminated, truncated, outcome = ep.env.step(ep.transcript.end_call(n))
    ep.reward += reward
    if outcome is not None:
        ep.outcome = outcome
        return None
    seen = ep.transcript.observe(obs, limit=room)
    if seen is None:  # the context is full: end it here
        ep.outcome = ep.env.cut()
        ep.reward += ep.outcome.score
    return seen


def _play_call(
    ep: _Episode, words: Sequence[str], renderer, limit: int, room: int
) -> list[str] | None:
    """Play `words` as the episode's next call, not sampled (log-prob 0): at most `limit` ids,
    then the env's step (`_after_call`, with its result)."""
    call_ids = renderer.encode_call(list(words), ep.env)[:limit]
    for token in call_ids:
        ep.transcript.act(token)
    return _after_call(ep, len(call_ids), room)


def scripted_rollout(
    policy: ScriptedPolicy | str,
    task: Task,
    *,
    seed: int = 0,
    env_config=None,
    vocab: Vocab | None = None,
    wrap_obs: bool = True,
    block_size: int | None = None,
    renderer=None,
) -> Trajectory:
    """One episode of a scripted policy, rendered exactly as a model rollout would be: the
    policy reads what a model reads (the issue and each observation through the vocabulary).
    `renderer`: a real model's (its chat), for demonstrations in its tokens. The episode stops
    at `block_size` tokens (default: TinyAgent's 512, or the real model's context)."""
    environment = environment_of_tasks([task])
    policy = environment.scripted(policy) if isinstance(policy, str) else policy
    config = config_for(environment, env_config)
    if renderer is None:
        renderer = WordRenderer(vocab or vocab_of(environment))
    elif hasattr(renderer, "for_environment"):
        renderer = renderer.for_environment(environment)
    rng = random.Random(seed)
    ep = _new_episode(environment, task, config, seed, renderer, wrap_obs)
    history: list[list[str]] = [list(ep.prompt.words)]  # the issue
    block_size = block_size or getattr(renderer, "context", 512)
    room = block_size - renderer.call_limit(config)
    while ep.outcome is None:
        words = policy(history, rng)[: config.max_call_tokens]
        seen = _play_call(ep, words, renderer, renderer.call_limit(config), room)
        if seen is not None:
            history.append(seen)
    return ep.trajectory()


@torch.inference_mode()
def rollout_batch(
    model: TinyAgent,  # or any policy with forward / new_cache / extend (arl.hf.HFPolicy)
    tasks: Sequence[Task],
    *,
    seed: int = 0,
    env_config=None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    vocab: Vocab | None = None,
    wrap_obs: bool = True,
    use_cache: bool = True,
    opening: Opening = (),
    on_step: Callable[[int, int], None] | None = None,
) -> list[Trajectory]:
    """Roll out one episode per task, all in one batched decode. Same seed, same ids.
    `opening`: the words of a first call forced on every episode (not sampled, log-prob 0), a
    probe of how a policy continues from a start it would not choose (Problem 29); or a
    function of the freshly reset env giving each episode its own (Problem 14's failing
    replace, built from the episode's file).
    `on_step(finished, B)`: called before each decoding step (a progress display)."""
    environment = environment_of_tasks(tasks)
    config = config_for(environment, env_config)
    renderer = renderer_of(model, vocab, environment)  # how the policy reads the environment
    limit = renderer.call_limit(config)
    room = model.config.block_size - limit
    device = model.lm_head.weight.device
    gen = torch.Generator().manual_seed(seed)
    eps = [
        _new_episode(environment, t, config, episode_seed(seed, k), renderer, wrap_obs)
        for k, t in enumerate(tasks)
    ]
    for ep in eps if opening else ():
        words = opening(ep.env) if callable(opening) else opening
        _play_call(ep, words, renderer, limit, room)
    B = len(eps)
    pending: list[list[int]] = [list(ep.transcript.ids) for ep in eps]
    call_len = [0] * B  # tokens of each row's open call
    cache = model.new_cache(B) if use_cache else None
    was_training = model.training
    model.eval()
    end_id = renderer.end_id
    # A padded cache (a real model's) stores every row's padding: rows that ended a call wait
    # for the others, and the turn's observations are appended together, once per turn.
    by_turn = bool(getattr(model, "pads_cache", False))
    waiting: list[list[int] | None] = [None] * B  # a row's observation, held for the turn
    sampled = 0  # tokens sampled so far (the progress report's)
    start = time.monotonic()
    while True:
        live = [b for b in range(B) if eps[b].outcome is None]
        if not live:
            break
        if time.monotonic() - start >= REPORT_AFTER_S:  # a long batch says where it is (paced),
            # a short one leaves the pace to its caller's lines (a trainer's steps)
            report(f"{B - len(live)} of {B} episodes done, {sampled:,} tokens sampled")
        if on_step is not None:
            on_step(B - len(live), B)
        if by_turn and all(waiting[b] is not None for b in live):  # every call ended: append
            for b in live:
                pending[b], waiting[b] = waiting[b], None
        fed = [b for b in live if pending[b]]  # rows that sample a token this step
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
        if len(fed) < B:
            logits = logits[fed]
        # (n_fed,) each: ids, their log-probs, the temperature-1 policy's entropy there
        tok, logp, ent = sample(logits.cpu(), temperature, top_p, gen, with_entropy=True)
        sampled += len(fed)
        pending = [[] for _ in eps]
        for b, t, lp, h in zip(fed, tok.tolist(), logp.tolist(), ent.tolist(), strict=True):
            ep = eps[b]
            ep.transcript.act(t, lp, h)
            call_len[b] += 1
            pending[b] = [t]
            if t == end_id or call_len[b] == limit:
                n, call_len[b] = call_len[b], 0
                over = _after_call(ep, n, room) is None
                # next: the call's last token and the observation after it; nothing once over
                pending[b] = [] if over else ep.transcript.ids[ep.transcript.calls[-1][1] - 1 :]
                if by_turn and not over:
                    pending[b], waiting[b] = [], pending[b]
    model.train(was_training)
    return [ep.trajectory() for ep in eps]
