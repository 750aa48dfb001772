"""PGConfig: one policy-gradient run, with the environment's config nested as `env`.

One validator (PGConfig.__post_init__; the environment's config checks its own fields), one
quick preset (PGConfig.quick), and one way in from a dict (make_config: a JSON file or parsed
`--set` pairs), whose keys are the fields or, for the environment, `env` and its dotted
`env.NAME`; `env.name` chooses the environment (bugfix, codefix: arl.env).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from functools import cache
from typing import Any, ClassVar

from arl.checks import check, check_seed
from arl.env import NAMES, SPLITS, get_environment
from arl.errors import ArlError
from arl.losses import AGGREGATIONS, KL_ESTIMATORS
from arl.train.pg_losses import LOSSES

MAX_FLOAT = 1e6  # no coefficient, penalty or temperature of a run is anywhere near this
MAX_EPISODES_PER_STEP = 4096  # one step's rollouts and batch must fit in memory
MAX_TURNS = 64  # an episode's calls, so that its tokens fit the model's context
# field: (lo, hi) of the integers and finite floats of PGConfig (None: no bound)
INT_RANGES = {
    "steps": (0, 100_000),
    "tasks_per_step": (1, 4096),
    "group_size": (1, 4096),
    "epochs": (1, 1000),
    "minibatches": (1, 4096),
    "microbatch_size": (0, 4096),
    "eval_samples": (1, 1000),
    "keep_checkpoints": (1, 1000),
    "max_refills": (0, 100),
    "filter_cooldown": (0, 10_000_000),
    "staleness": (0, 1000),
    "eval_every": (0, 10_000_000),
    "save_every": (0, 10_000_000),
    "ref_reset_every": (0, 10_000_000),
    "rollout_workers": (0, 1024),
}
FLOAT_RANGES = {
    "weight_decay": (0, MAX_FLOAT),
    "grad_clip": (0, MAX_FLOAT),
    "kl_beta": (0, MAX_FLOAT),
    "entropy_coef": (0, MAX_FLOAT),
    "target_entropy": (0, MAX_FLOAT),
    "entropy_lr": (0, MAX_FLOAT),
    "clip_high": (0, MAX_FLOAT),
    "is_cap": (1, MAX_FLOAT),
    "sampler_noise": (0, 100),
    "teacher_weight": (0, MAX_FLOAT),
    "reward_weight": (0, MAX_FLOAT),
    "teacher_discount": (0, 1),
    "gspo_clip_high": (0, MAX_FLOAT),
}
CHOICES = {
    "split": SPLITS,
    "baseline": ("loo", "mean", "none"),
    "aggregation": AGGREGATIONS,
    "loss": tuple(LOSSES),
    "kl": ("off", *KL_ESTIMATORS),
    "kl_in": ("loss", "reward"),
    "sampler_dtype": ("float32", "bfloat16"),
}


def default_env(name: str = "bugfix") -> Any:
    """The PG trainer's environment config: the environment's defaults, with the exploit
    detector on."""
    return replace(get_environment(name).default_config(), zero_exploits=True)


@dataclass(frozen=True)
class PGConfig:
    """One policy-gradient run. Defaults are Appendix B's recommendations for verifier rewards."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = CHOICES  # the allowed strings (`--keys`)
    steps: int = 60  # optimizer-step rounds (one batch of rollouts each)
    seed: int = 0  # task choice, sampling, minibatch order
    split: str = "train"  # task pool to train on (when train_pg is not given tasks)
    tasks_per_step: int = 8  # distinct tasks (prompts) per step
    group_size: int = 8  # G: episodes per task, for the group baseline (Problem 3)
    temperature: float = 1.0  # sampling temperature; the trainer scores at the same one
    top_p: float = 1.0  # nucleus sampling (not reproduced by the trainer: keep 1.0 for RL)
    # environment and reward (Problems 7, 8, 9, 12, 13, 14): name (bugfix or codefix), reward,
    # mixed_alpha, step_penalty, truncation, max_turns, max_call_tokens, zero_exploits, and the
    # environment's own (BugFix: flaky_prob, flaky_votes; CodeFix: errors, sandbox)
    env: Any = field(default_factory=default_env)
    # --- advantages (Problem 4)
    baseline: str = "loo"  # group baseline: loo (leave-one-out), mean, or none
    std_norm: bool = False  # divide by the group std (book: off for verifier rewards)
    # --- loss and optimizer (Problems 1, 2, 26)
    loss: str = "ppo"  # the token loss (pg_losses.LOSSES): ppo (token ratio) | gspo (sequence)
    aggregation: str = "token_mean"  # token_mean | seq_mean_token_mean | constant (B x L_max)
    lr: float = 3e-4  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    grad_clip: float = 1.0  # max global grad norm (0: off)
    epochs: int = 1  # passes over each batch of rollouts
    minibatches: int = 4  # optimizer steps per pass (episodes split evenly; PPO-style)
    microbatch_size: int = 0  # episodes per backward pass, accumulated (0: whole minibatch)
    clip: bool = True  # ratio clipping of pi / pi_prox (gspo: of the sequence ratio)
    clip_low: float = 0.2  # ppo's ratio floor 1 - clip_low
    clip_high: float = 0.28  # ppo's ratio ceiling 1 + clip_high (clip-higher: above clip_low)
    gspo_clip_low: float = 3e-4  # gspo's sequence-ratio floor 1 - gspo_clip_low (GSPO's 3e-4)
    gspo_clip_high: float = 4e-4  # gspo's sequence-ratio ceiling 1 + gspo_clip_high (4e-4)
    # --- KL to a reference (Problems 5, 6)
    kl: str = "off"  # off | k1 | k2 | k3 (book: off or small for verifier rewards)
    kl_in: str = "loss"  # where the penalty goes: loss or reward
    kl_beta: float = 0.01  # KL coefficient
    ref_reset_every: int = 0  # reset the reference to the current policy every N steps (0: never)
    # --- entropy (Problem 26)
    entropy_coef: float = 0.0  # entropy bonus coefficient (start value with a target)
    target_entropy: float = 0.0  # nats per policy token; > 0 turns on the controller
    entropy_lr: float = 0.01  # controller step: coef += entropy_lr * (target - entropy)
    # --- task selection (Problem 3)
    dynamic_sampling: bool = False  # refill groups whose rewards are all equal with new tasks
    max_refills: int = 2  # refill rounds per step
    filter_cooldown: int = 5  # a task whose group was all-pass or all-fail sits out N steps
    # --- asynchronous sampling (Problem 16)
    staleness: int = 1  # k: rollouts come from the weights of k steps ago (0: on-policy)
    is_correction: bool = True  # multiply each token by min(pi_prox / mu, is_cap)
    is_cap: float = 2.0  # C, the importance-weight cap
    # --- the sampler's numerics (Problem 20): its copy of the same weights, refreshed every step
    sampler_dtype: str = "float32"  # float32 | bfloat16 (logits in bf16, log-softmax in fp32)
    sampler_noise: float = 0.0  # > 0: its logits get fresh N(0, sd^2) noise (nats) per token
    # --- rollout workers on Ray (the `staleness` bound and the correction apply to them)
    rollout_workers: int = 0  # Ray actors that sample the rollouts (0: this process samples)
    async_rollouts: bool = False  # workers sample ahead on older weights, at most `staleness`
    ray_address: str = "local"  # "local": a Ray started here; else a cluster address
    # --- on-policy distillation (Problem 29): each policy token's advantage is also
    # teacher_weight x sg[log pi_teacher - log pi_student], discounted over the later tokens
    teacher: str = ""  # the teacher (checkpoint or model); train_pg is given it loaded
    teacher_weight: float = 0.0  # weight of the teacher's per-token advantage (0: no teacher)
    teacher_discount: float = 0.0  # g: a token also gets g^k x the k-th later token's (0: its own)
    reward_weight: float = 1.0  # weight of the environment's group advantage (0: teacher only)
    # --- bookkeeping
    eval_every: int = 0  # evaluate train and held-out pass rates every N steps (0: off)
    eval_samples: int = 4  # episodes per task in each evaluation
    out: str = ""  # run directory: metrics.jsonl and checkpoints ("" : nothing written)
    save_every: int = 0  # checkpoint every N steps (0: only at the end); needs out
    keep_checkpoints: int = 2  # newest checkpoints kept on disk
    resume: bool = False  # continue from the newest checkpoint in out, if there is one

    def __post_init__(self) -> None:
        for name, (lo, hi) in INT_RANGES.items():
            check(name, getattr(self, name), lo, hi, integer=True)
        check_seed("seed", self.seed)
        for name, (lo, hi) in FLOAT_RANGES.items():
            check(name, getattr(self, name), lo, hi)
        check("temperature", self.temperature, 0, MAX_FLOAT, open_lo=True)
        check("top_p", self.top_p, 0, 1, open_lo=True)
        check("lr", self.lr, 0, 1.0, open_lo=True)
        check("clip_low", self.clip_low, 0, 1, open_hi=True)
        check("gspo_clip_low", self.gspo_clip_low, 0, 1, open_hi=True)
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                self._refuse(name, f"must be one of {', '.join(allowed)}")
        if not isinstance(self.env, env_types()):
            names = ", ".join(NAMES)
            self._refuse("env", f"must be an environment's config (env.name: {names})")
        check("env.max_turns", self.env.max_turns, 1, MAX_TURNS, integer=True)
        if self.minibatches > self.episodes_per_step:
            self._refuse("minibatches", "must be <= episodes")
        if self.episodes_per_step > MAX_EPISODES_PER_STEP:
            self._refuse(
                "group_size", f"tasks_per_step x group_size must be <= {MAX_EPISODES_PER_STEP}"
            )
        if self.resume and not self.out:
            self._refuse("resume", "needs out")
        if self.async_rollouts and not self.rollout_workers:
            self._refuse("async_rollouts", "needs rollout_workers >= 1")
        if self.teacher_weight and not self.teacher:
            self._refuse("teacher_weight", "needs a teacher")
        if self.loss == "gspo" and self.teacher_weight:
            self._refuse("loss", "gspo takes one advantage per episode: not with teacher_weight")
        if not self.teacher_weight and not self.reward_weight:
            self._refuse("reward_weight", "and teacher_weight are both 0: nothing to learn from")
        if self.sampler_dtype != "float32" and self.rollout_workers:
            self._refuse(
                "sampler_dtype", "other than float32 samples here: not with rollout_workers"
            )
        if self.sampler_noise and self.rollout_workers:
            self._refuse("sampler_noise", "samples here: not with rollout_workers")
        if self.async_rollouts and self.dynamic_sampling:
            self._refuse("dynamic_sampling", "is synchronous: not with async_rollouts")

    def _refuse(self, name: str, what: str) -> None:
        raise ArlError(f"{name}: {what}, got {getattr(self, name)!r}")

    @property
    def episodes_per_step(self) -> int:
        return self.tasks_per_step * self.group_size

    @property
    def l_max(self) -> int:
        """The policy-token budget of an episode: the constant normalizer's L_max."""
        return self.env.max_turns * self.env.max_call_tokens

    @property
    def updates_per_step(self) -> int:
        return self.epochs * self.minibatches

    @property
    def prox_forward(self) -> bool:
        """Whether a step computes pi_prox in a frozen forward pass: the batch is updated more
        than once, or the KL penalty is folded into the reward. A sampler in another dtype
        (Problem 20) needs none: with one update, pi_prox is the trainer's own float32 forward
        of the current weights (the surrogate's detached log-probs), never the sampler's mu."""
        return self.updates_per_step > 1 or (self.kl != "off" and self.kl_in == "reward")

    def quick(self) -> PGConfig:
        """The one --quick preset of the reproductions: 4 tasks x 4 episodes, 4 steps."""
        return replace(self, tasks_per_step=4, group_size=4, steps=4)


def minimal_reinforce(**overrides) -> PGConfig:
    """Chapter 15's minimal REINFORCE: G=8 on 8 tasks, r - mean(group), no clipping, one
    on-policy update per batch, no filtering and no importance weight."""
    base = dict(
        baseline="mean",
        clip=False,
        epochs=1,
        minibatches=1,
        staleness=0,
        is_correction=False,
        filter_cooldown=0,
        dynamic_sampling=False,
    )
    return PGConfig(**{**base, **overrides})


# --- from a dict (a JSON file, parsed --set pairs, a checkpoint's stored config) ---------------

KINDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
FIELD_CHECKS = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
}
# fields added after checkpoints were written, with the value that meant their absence
ADDED = {
    "teacher": "",
    "teacher_weight": 0.0,
    "teacher_discount": 0.0,
    "reward_weight": 1.0,
    "sampler_dtype": "float32",
    "sampler_noise": 0.0,
    "loss": "ppo",
    "gspo_clip_low": 3e-4,
    "gspo_clip_high": 4e-4,
}
# fields added after a locked rule recorded a whole PGConfig (Chapter 15's), with their
# defaults: at the default a rule leaves them out, so that its fingerprint still matches
LATER_FIELDS = {"sampler_noise": 0.0}


def pg_settings(config: PGConfig) -> dict:
    """A PGConfig as a dict without the LATER_FIELDS at their defaults: what a locked rule or a
    resumed run recorded before those fields existed."""
    out = asdict(config)
    for k, v in LATER_FIELDS.items():
        if out[k] == v:
            del out[k]
    return out


REMOVED = {"mask_shift": "Problem 28's shifted mask lives in arl/experiments/problems/mutations.py"}


def _kind(f) -> str:
    return f.type if isinstance(f.type, str) else f.type.__name__


@cache
def env_types() -> tuple[type, ...]:
    """The config classes of every environment."""
    return tuple(type(get_environment(n).default_config()) for n in NAMES)


@cache
def env_kinds() -> dict[str, str]:
    """Every field of any environment's config -> its kind (a field two share has one kind)."""
    return {f.name: _kind(f) for t in env_types() for f in fields(t)}


def field_kinds() -> dict[str, str]:
    """Every settable key, dotted for the environment ('env.reward'), -> its kind (int, ...)."""
    top = {f.name: _kind(f) for f in fields(PGConfig) if f.name != "env"}
    return top | {f"env.{k}": kind for k, kind in env_kinds().items()}


def unknown_key(key: str) -> ArlError:
    """The error for a key PGConfig lacks; a pre-nesting flat name points at its dotted one."""
    if key in env_kinds():
        return ArlError(f"{key}: now env.{key} (PGConfig holds the environment as env)")
    if key in REMOVED:
        return ArlError(f"{key}: no longer a PGConfig field ({REMOVED[key]})")
    return ArlError(f"{key}: unknown PGConfig field (see examples/pg.json)")


def make_env_config(env: dict[str, Any]) -> Any:
    """The environment config of a dict of its fields; `name` (default bugfix) chooses the
    environment, and a field that environment lacks is named."""
    name = env.get("name", "bugfix")
    if name not in NAMES:
        raise ArlError(f"env.name: unknown environment {name!r} (choose from {', '.join(NAMES)})")
    base = default_env(name)
    own = {f.name for f in fields(base)}
    for key in env:
        if key not in own:
            raise ArlError(f"env.{key}: not a field of the {name} environment's config")
    try:
        return replace(base, **env)
    except ArlError as e:
        raise ArlError(f"env.{e}") from None


def make_config(values: dict[str, Any]) -> PGConfig:
    """A PGConfig from a dict whose `env` is a dict of environment-config fields; names any bad
    field."""
    kinds = field_kinds()
    values = dict(values)
    env = values.pop("env", {})
    if not isinstance(env, dict):
        raise ArlError(f"env: expected an object of environment-config fields, got {env!r}")
    flat = {**values, **{f"env.{k}": v for k, v in env.items()}}
    for key, value in flat.items():
        if key not in kinds:
            raise unknown_key(key)
        if not FIELD_CHECKS[kinds[key]](value):
            raise ArlError(f"{key}: expected {KINDS[kinds[key]]}, got {value!r}")
    return PGConfig(**values, env=make_env_config(env))


def flat_dict(config: PGConfig) -> dict[str, Any]:
    """The config as one level of dotted keys: {'lr': ..., 'env.reward': ...}."""
    d = asdict(config)
    return {
        **{k: v for k, v in d.items() if k != "env"},
        **{f"env.{k}": v for k, v in d["env"].items()},
    }


def flat_saved(saved: dict[str, Any]) -> dict[str, Any]:
    """A stored config (nested, or flat from before the nesting) as dotted keys."""
    out = {k: v for k, v in saved.items() if k != "env" and k not in REMOVED}
    out |= {f"env.{k}": v for k, v in (saved.get("env") or {}).items()}
    if "env" not in saved:  # a checkpoint written before PGConfig held an EnvConfig
        config = get_environment("bugfix").config_type  # EnvConfig then, BugFixConfig now
        bugfix = {f.name for f in fields(config)}
        out = {(f"env.{k}" if k in bugfix else k): v for k, v in out.items()}
        out.setdefault("env.max_call_tokens", config().max_call_tokens)  # fixed back then
    out.setdefault("env.name", "bugfix")  # written before PGConfig named its environment
    return ADDED | out
