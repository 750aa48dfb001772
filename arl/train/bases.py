"""The starting policies every Chapter 15 recipe shares: the weak base and the oracle SFT.

The weak base stands for a pretrained model: next-token pretraining on the training
listings (so that it can copy a name it read, as a pretrained LM can), then SFT on
well-formed but unskilled play (blind guesses, and episodes that read and then guess an
op at random): it has the format, not the skill (Section 15.2). Oracle SFT continues from
it on the 20 oracle demonstrations, each drawn with a fresh accumulator name (the gym
draws one per episode), so that `init` is learned as copying, not as a memorized name.
The RL cold start (Section 15.5) is chosen by state, not by step: the first checkpoint
whose training pass rate reaches `cold_start_pass` (the book's step-20 checkpoint passed
0.80 on train; on another gym the step differs).
Both are cached on disk, keyed by their config and a fingerprint of the environment, so the
reproductions that start from them do not retrain them. Every function takes the environment
(BugFix by default; CodeFix's bases are made by the same recipe on its own tasks and words).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from arl.env import Environment, get_environment
from arl.errors import ArlError
from arl.model import TinyAgent, TinyAgentConfig
from arl.progress import report
from arl.rollout import episode_seed, scripted_rollout, vocab_of, vocab_record
from arl.text import OBS, OBS_END
from arl.train.checkpoint import load_checkpoint, save_checkpoint
from arl.train.common import Hook
from arl.train.pretrain import PretrainConfig, lm_pretrain
from arl.train.sft import SFTConfig, sft_train
from arl.types import Trajectory

BASES_VERSION = 5  # bump when the recipe below changes, to invalidate cached checkpoints


@dataclass(frozen=True)
class BaseConfig:
    """How the weak base and the oracle-SFT model are made. Defaults reproduce Section 15.2."""

    seed: int = 0  # initialization, data and minibatch sampling
    pretrain_steps: int = 300  # next-token steps on the listings before the weak-base SFT
    pretrain_lr: float = 1e-3
    pretrain_batch: int = 32
    weak_blind_per_task: int = 4  # blind episodes per training task in the weak-base data
    weak_random_per_task: int = 0  # well-formed random episodes per training task
    weak_unskilled_per_task: int = 4  # read-then-guess episodes per training task
    # failed-replace-then-retry episodes per training task (the environment's `retry` play);
    # above 0, every play runs under each of the environment's play configs in turn (CodeFix:
    # helpful and terse errors). 0 is the recipe before it existed, and leaves the cache key as
    # it was (`_fingerprint`)
    weak_retry_per_task: int = 0
    weak_steps: int = 150  # SFT steps of the weak base
    weak_lr: float = 1e-3
    weak_batch: int = 32
    sft_steps: int = 100  # oracle SFT steps from the weak base
    sft_lr: float = 2e-3  # the sweep in the issue-8 closing note: lr 1e-3 / 2e-3 / 3e-3 at
    sft_batch: int = 40  # batch 20, then 2e-3 at batch 40 (seeds 0, 1; fastest to converge)
    sft_warmup: int = 0  # linear warmup steps of oracle SFT's learning rate
    sft_decay: str = "constant"  # oracle SFT's learning rate after warmup: constant or cosine
    sft_beta2: float = 0.999  # oracle SFT's AdamW second-moment decay
    cold_start_pass: float = 0.75  # the cold start: first checkpoint with train pass >= this
    cold_eval_every: int = 10  # oracle-SFT steps between checks of the train pass rate
    cold_eval_samples: int = 8  # episodes per training task in each check (160)
    cold_start_step: int = 0  # > 0: take the checkpoint at this step instead (tiny models)
    # recovery demonstrations per training task in the oracle SFT's data (the environment's
    # `recover` play: a replace that fails, its error read, then the oracle's; Problem 29's
    # teacher). 0 is the recipe before it existed, and leaves the cache key as it was
    oracle_recover_per_task: int = 0
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4

    @property
    def pretrain(self) -> PretrainConfig:
        return PretrainConfig(
            self.pretrain_steps, self.pretrain_batch, self.pretrain_lr, seed=self.seed + 2
        )

    @property
    def weak_sft(self) -> SFTConfig:
        return SFTConfig(self.weak_steps, self.weak_batch, self.weak_lr, seed=self.seed)

    @property
    def oracle_sft(self) -> SFTConfig:
        return SFTConfig(
            self.sft_steps,
            self.sft_batch,
            self.sft_lr,
            seed=self.seed + 1,
            warmup_steps=self.sft_warmup,
            decay=self.sft_decay,
            beta2=self.sft_beta2,
        )

    def quick(self) -> BaseConfig:
        """A reduced version for tests: fewer steps, same recipe."""
        from dataclasses import replace

        return replace(
            self,
            pretrain_steps=20,
            weak_steps=60,
            weak_lr=3e-3,
            sft_steps=20,
            cold_eval_every=5,
            cold_eval_samples=2,
            n_layer=2,
            n_embd=32,
            n_head=2,
        )


def _env(environment: Environment | str) -> Environment:
    return get_environment(environment) if isinstance(environment, str) else environment


def new_model(config: BaseConfig, environment: Environment | str = "bugfix") -> TinyAgent:
    """A fresh TinyAgent of the config's shape over the environment's vocabulary."""
    torch.manual_seed(config.seed)
    shape = dict(n_layer=config.n_layer, n_embd=config.n_embd, n_head=config.n_head)
    return TinyAgent(TinyAgentConfig(vocab_size=len(vocab_of(_env(environment))), **shape))


def weak_base_data(
    config: BaseConfig = BaseConfig(), environment: Environment | str = "bugfix"
) -> list[Trajectory]:
    """Blind and read-then-guess episodes on every training task (160 by default). With
    `weak_retry_per_task` above 0, also that many retry episodes per task, and every play's
    k-th episode of a task runs under the environment's k-th play config in turn (CodeFix:
    helpful, then terse errors), so that no kind of error is tied to one habit (giving up
    after a blind guess, or retrying)."""
    env = _env(environment)
    if config.weak_retry_per_task and "retry" not in env.policies:
        raise ArlError(f"weak_retry_per_task: the {env.name} environment has no retry play")
    plan = (  # scripted policies by role (arl.env.ROLES), as the environment casts them
        [(env.role("blind"), r) for r in range(config.weak_blind_per_task)]
        + [(env.role("random_wellformed"), r) for r in range(config.weak_random_per_task)]
        + [(env.role("unskilled"), r) for r in range(config.weak_unskilled_per_task)]
    )
    mixed = config.weak_retry_per_task > 0
    plan += [(env.policies["retry"], r) for r in range(config.weak_retry_per_task)]
    jobs = [
        (t, p, _play_config(env, r) if mixed else None) for t in env.tasks("train") for p, r in plan
    ]
    return [
        scripted_rollout(p, t, seed=episode_seed(config.seed, k), env_config=c)
        for k, (t, p, c) in enumerate(jobs)
    ]


def _play_config(environment: Environment, k: int):
    """The k-th of the environment's play configs, cycling (its default when it has none)."""
    configs = environment.play_configs()
    return configs[k % len(configs)] if configs else None


def oracle_demos(environment: Environment | str = "bugfix") -> list[Trajectory]:
    """One oracle demonstration per training task (BugFix: 20)."""
    env = _env(environment)
    return [scripted_rollout(env.role("oracle"), t, seed=0) for t in env.tasks("train")]


def oracle_sft_data(
    wrap_obs: bool = True,
    renderer=None,
    environment: Environment | str = "bugfix",
    recover: int = 0,
) -> list[Trajectory]:
    """The demonstrations under every accumulator name (BugFix: 20 x 6 renderings): sampling
    one uniformly samples a task uniformly and draws its accumulator afresh, as the gym does.

    With one fixed name per task, 4 init demonstrations teach 4 memorized names.
    `renderer`: a real model's, for demonstrations in its tokens. `recover` above 0: that many
    recovery demonstrations per task besides (the environment's `recover` play, on episode
    seeds after the renderings', so their names vary too).
    """
    env = _env(environment)
    demos = [
        scripted_rollout(env.role("oracle"), t, seed=k, wrap_obs=wrap_obs, renderer=renderer)
        for t in env.tasks("train")
        for k in range(env.renderings)
    ]
    if recover and "recover" not in env.policies:
        raise ArlError(f"oracle_recover_per_task: the {env.name} environment has no recover play")
    return demos + [
        scripted_rollout(
            env.policies["recover"],
            t,
            seed=env.renderings + k,
            wrap_obs=wrap_obs,
            renderer=renderer,
        )
        for t in env.tasks("train")
        for k in range(recover)
    ]


def code_corpus(environment: Environment | str = "bugfix") -> list[list[int]]:
    """The pretraining text: the environment's training listings (`corpus`), as tool output."""
    env = _env(environment)
    vocab = vocab_of(env)
    return [vocab.encode([OBS, *words, OBS_END]) for words in env.corpus()]


# what only the oracle SFT and the cold start read: the weak base does not depend on them
ORACLE_FIELDS = (
    "sft_steps",
    "sft_lr",
    "sft_batch",
    "sft_warmup",
    "sft_decay",
    "sft_beta2",
    "cold_start_pass",
    "cold_eval_every",
    "cold_eval_samples",
    "cold_start_step",
    "oracle_recover_per_task",
)


# fields added after bases were cached, with the default that is the recipe before them
LATER_FIELDS = {"weak_retry_per_task": 0, "oracle_recover_per_task": 0}


def base_settings(config: BaseConfig) -> dict:
    """The config as a dict, without the LATER_FIELDS at their defaults: what a cache key or a
    locked rule recorded before those fields existed, so that neither changes."""
    settings = asdict(config)
    for k, v in LATER_FIELDS.items():
        if settings[k] == v:
            del settings[k]
    return settings


def _fingerprint(kind: str, config: BaseConfig, environment: Environment | str = "bugfix") -> str:
    """The cache key: the recipe version, the settings `kind` depends on, and the environment."""
    gym = _env(environment).fingerprint()
    settings = base_settings(config)
    if kind.endswith("weak_base"):  # a sweep over oracle-SFT settings reuses one weak base
        settings = {k: v for k, v in settings.items() if k not in ORACLE_FIELDS}
    blob = json.dumps([kind, BASES_VERSION, settings, gym], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """Where trained bases are kept: $ARL_CACHE, else the user's cache folder (one per user,
    not per working directory, so a run from another folder does not retrain them)."""
    if os.environ.get("ARL_CACHE"):
        return Path(os.environ["ARL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "arl"


def _cached(kind: str, config: BaseConfig, build, environment: Environment | str) -> TinyAgent:
    """Load a base from the cache, or build it (saying so on stderr) and cache it; a cached
    checkpoint that does not load (corrupt, or an older format) is rebuilt. A base of another
    environment than BugFix is cached as ENV-KIND (BugFix's keep their names and keys)."""
    env = _env(environment)
    kind = kind if env.name == "bugfix" else f"{env.name}-{kind}"
    path = cache_dir() / f"{kind}-{_fingerprint(kind, config, env)}"
    with _building(path):  # two processes wanting one base: one trains it, the other loads it
        return _load_or_build(kind, config, build, path, env)


@contextmanager
def _building(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the cache entry `path` (a file beside it) for the block; a
    cache folder where no lock file can be made (read-only) is used without one."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if this process dies
        yield
    finally:
        os.close(fd)


def _load_or_build(kind: str, config: BaseConfig, build, path: Path, env: Environment) -> TinyAgent:
    import sys

    if (path / "model.safetensors").is_file():
        try:
            return load_checkpoint(path)
        except ArlError as e:
            print(f"arl: rebuilding the cached {kind} ({e})", file=sys.stderr)
    print(
        f"arl: training the {kind} for seed {config.seed} (once; cached in {path.parent})",
        file=sys.stderr,
        flush=True,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the thread count changes a trained model's last bits: one
    try:  # thread, so a cached base is the same whichever process trains it first
        model = build()
    finally:
        torch.set_num_threads(threads)
    # the environment it speaks, as every other checkpoint records it (`--env` defaults to it)
    extra = {"kind": kind, "base_config": asdict(config), **vocab_record(env)}
    save_checkpoint(model, path, extra=extra)
    return model


def weak_base(
    config: BaseConfig = BaseConfig(), environment: Environment | str = "bugfix"
) -> TinyAgent:
    """The weak base: format without skill (trained once per config, then loaded)."""

    def build() -> TinyAgent:
        model = new_model(config, environment)
        lm_pretrain(
            model,
            code_corpus(environment),
            config.pretrain,
            lambda step: report(f"weak base: pretraining step {step}/{config.pretrain_steps}"),
        )
        sft_train(
            model,
            weak_base_data(config, environment),
            config.weak_sft,
            hook_every=1,
            hook=lambda step, _: report(f"weak base: SFT step {step}/{config.weak_steps}"),
        )
        return model

    return _cached("weak_base", config, build, environment)


def train_pass(
    model: TinyAgent, samples: int, seed: int, environment: Environment | str = "bugfix"
) -> float:
    """Hidden-test pass rate on the training tasks (the state the cold start is chosen by)."""
    from arl.eval.metrics import graded, run_policy

    trajs = graded(run_policy(model, _env(environment).tasks("train"), samples, seed=seed))
    return sum(t.passed for t in trajs) / max(len(trajs), 1)


def train_oracle_sft(
    config: BaseConfig = BaseConfig(),
    hook: Hook | None = None,
    hook_every: int = 10,
    environment: Environment | str = "bugfix",
) -> tuple[TinyAgent, TinyAgent, list[dict]]:
    """Oracle SFT from the weak base; returns (final model, cold-start copy, history).

    The cold start is the first checkpoint (every `cold_eval_every` steps) whose train
    pass rate reaches `cold_start_pass`, or the final model if none does; the history
    records `cold_start` = {step, train_pass, reached}.
    """
    import copy

    model = weak_base(config, environment)
    kept: dict = {}

    def keep(step: int, m: TinyAgent) -> dict | None:
        out = {}
        due = step % config.cold_eval_every == 0 and step >= config.cold_start_step
        if "cold" not in kept and due:  # by step (cold_start_step > 0) or by state
            p = train_pass(m, config.cold_eval_samples, config.seed * 13 + step, environment)
            if config.cold_start_step or p >= config.cold_start_pass:
                kept["cold"] = copy.deepcopy(m)
                kept["info"] = {"step": step, "train_pass": p, "reached": True}
        if hook and (step % hook_every == 0 or step == config.sft_steps):
            out |= hook(step, m) or {}
        return out or None

    every = _gcd(hook_every, config.cold_eval_every) if hook else config.cold_eval_every
    data = oracle_sft_data(environment=environment, recover=config.oracle_recover_per_task)
    history = sft_train(model, data, config.oracle_sft, keep, every)
    if "cold" not in kept:  # never reached: RL starts from the final model
        seed = config.seed * 13 + config.sft_steps
        p = train_pass(model, config.cold_eval_samples, seed, environment)
        kept["cold"] = copy.deepcopy(model)
        kept["info"] = {"step": config.sft_steps, "train_pass": p, "reached": False}
    history.append({"cold_start": kept["info"]})
    return model, kept["cold"], history


def cold_start(
    config: BaseConfig = BaseConfig(), environment: Environment | str = "bugfix"
) -> TinyAgent:
    """The oracle-SFT checkpoint chosen by state (`cold_start_pass`): the RL cold start
    (cached)."""
    build = lambda: train_oracle_sft(config, environment=environment)[1]  # noqa: E731
    return _cached("cold_start", config, build, environment)


def oracle_model(
    config: BaseConfig = BaseConfig(), environment: Environment | str = "bugfix"
) -> TinyAgent:
    """The oracle-SFT model after all `sft_steps` (cached): a strong teacher (Problem 29)."""
    build = lambda: train_oracle_sft(config, environment=environment)[0]  # noqa: E731
    return _cached("oracle_sft", config, build, environment)


def _gcd(a: int, b: int) -> int:
    import math

    return math.gcd(a, b) or max(a, b)
