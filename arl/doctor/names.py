"""The one table of metric names: TRL's and verl's names -> arl's, and what to log where a
source has no counterpart (the doctor's "could not check" hints).

arl's names are those `arl train pg` writes to metrics.jsonl (arl/train/pg_metrics.py); a few
the doctor adds for quantities other frameworks log and arl does not (EXTRA). A source name
that is not in its table, and matches no pattern, is kept in `Run.unmapped`.
"""

from __future__ import annotations

import re

# arl names that arl's trainers do not write, for quantities TRL or verl log: name -> meaning
EXTRA = {
    "len_mean": "mean generated tokens per episode (TRL completions/mean_length, verl "
    "response_length/mean)",
    "len_max": "longest generated episode in the step (tokens)",
    "mismatch/max": "max over tokens of |log pi_old - log mu| (TRL sampling_logp_difference/max)",
    "is_ratio/mean": "mean importance weight pi_old / mu over tokens, after its cap",
    "is_ratio/max": "largest importance weight pi_old / mu in the step",
    "is_ratio/min": "smallest importance weight pi_old / mu in the step",
    "kl/mu_k1": "mean k1 estimate of KL(mu || pi_old) (verl rollout_corr/kl)",
    "kl/ref_k1": "mean k1 estimate of the KL to the reference (verl in-reward KL penalty)",
    "kl/update_k1": "mean k1 estimate of KL(pi_old || pi_theta) during the update (PPO's "
    "approx_kl; verl actor/ppo_kl)",
    "clip_frac_low": "share of tokens clipped at the lower PPO bound",
    "reward_std": "mean within-group standard deviation of the reward",
    "eval/heldout_reward": "mean reward on the held-out (eval/validation) set",
    "tool_failure_frac": "share of tool calls that failed (TRL tools/failure_frequency)",
    "tool_calls_per_episode": "tool calls per episode",
    "lr": "the learning rate at the step",
}

# TRL (GRPOTrainer, and DPO's reward accuracy): trainer_state.json log_history name -> arl name
TRL = {
    "reward": "reward",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "degenerate_frac",
    "entropy": "entropy",
    "kl": "kl/ref_k3",  # TRL's per-token kl is k3 against the reference model (beta > 0)
    "clip_ratio/region_mean": "clip_frac",
    "clip_ratio/low_mean": "clip_frac_low",
    "completions/clipped_ratio": "truncated_frac",  # ended at max_completion_length, no EOS
    "completions/mean_length": "len_mean",
    "completions/max_length": "len_max",
    "sampling/sampling_logp_difference/mean": "mismatch/mean",
    "sampling/sampling_logp_difference/max": "mismatch/max",
    "sampling/importance_sampling_ratio/mean": "is_ratio/mean",
    "sampling/importance_sampling_ratio/max": "is_ratio/max",
    "sampling/importance_sampling_ratio/min": "is_ratio/min",
    "tools/failure_frequency": "tool_failure_frac",
    "tools/call_frequency": "tool_calls_per_episode",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "lr",
    "rewards/accuracies": "reward_accuracy",  # DPOTrainer
    "eval_reward": "eval/heldout_reward",
    "step_time": "time/step",
}

# verl (its file logger: {"step": N, "data": {name: value}} per line) -> arl name
VERL = {
    "actor/entropy": "entropy",
    "actor/pg_clipfrac": "clip_frac",
    "actor/pg_clipfrac_lower": "clip_frac_low",
    "actor/ppo_kl": "kl/update_k1",
    "actor/kl_loss": "kl/ref_k3",  # k3 with kl_loss_type=low_var_kl, GRPO's usual setting
    "actor/reward_kl_penalty": "kl/ref_k1",  # algorithm.kl_penalty defaults to "kl" (k1)
    "actor/pg_loss": "loss",
    "actor/grad_norm": "grad_norm",
    "actor/lr": "lr",
    "critic/score/mean": "reward",  # the reward function's score, before any KL penalty
    "response_length/mean": "len_mean",
    "response_length/max": "len_max",
    "response_length/clip_ratio": "truncated_frac",  # hit max_response_length
    "num_turns/mean": "mean_turns",
    "tool_call_counts/mean": "tool_calls_per_episode",
    "timing_s/step": "time/step",
    "timing_s/gen": "time/sample",
    "timing_s/update_actor": "time/train",
}
# verl's rollout-correction metrics: prefix rollout_corr/ (mismatch/ in older releases)
VERL_CORRECTION = {
    "rollout_is_ratio_fraction_high": "capped_frac",  # share above rollout_is_threshold
    "k3_kl": "kl/mu_k3",
    "kl": "kl/mu_k1",
    "rollout_is_mean": "is_ratio/mean",
    "rollout_is_max": "is_ratio/max",
    "rollout_is_min": "is_ratio/min",
}
VERL.update(
    {f"{p}/{k}": v for p in ("rollout_corr", "mismatch") for k, v in VERL_CORRECTION.items()}
)
# validation: val-core/<data source>/<variable>/mean@<n> for the core variable (acc, else
# reward), val-aux/... for every other (averaged over the data sources). A data source may
# hold slashes (arl's rows: arl/bugfix), so the variable is the part before mean@<n>.
VERL_VALIDATION = re.compile(r"^val-(?:core|aux)/.+/([^/]+)/mean@\d+$")
VERL_VALIDATION_NAME = {"acc": "eval/heldout_pass", "reward": "eval/heldout_reward"}
VERL_VALIDATION_NAME["score"] = "eval/heldout_reward"
# arl's agent loop (arl.bridges.verl.EPISODE_METRICS) reports each episode's arl metrics as
# reward_extra_info, which verl (0.9) logs at validation only: val-aux/<source>/<name>/mean@<n>.
# Those verl logs no training counterpart of keep their arl name; tool_call_counts (logged each
# step as tool_call_counts/mean), turns (verl's num_turns counts messages) and truncated
# (response_length/clip_ratio) stay apart, so a step's training value is never averaged with
# a validation one.
VERL_EPISODE = (
    "malformed_per_episode",
    "immediate_submit_frac",
    "public_pass_rate",
    "public_hidden_gap",
    "hack_rate",
)
VERL_VALIDATION_NAME.update({name: name for name in VERL_EPISODE})

TABLES = {"trl": TRL, "verl": VERL}

# Where a source lacks a quantity: what to log, in its own terms (arl name -> hint)
TO_LOG = {
    "trl": {
        "kl/mu_k3": "the mean k3 of KL(mu || pi_old) over completion tokens from vLLM's "
        "sampling logprobs (use_vllm=True with vllm_importance_sampling_correction)",
        "kl/mu_absq99": "the 99th percentile of |old_per_token_logps - "
        "sampling_per_token_logps| (TRL logs only its mean and max)",
        "mismatch/mean": "use_vllm=True with vllm_importance_sampling_correction=True "
        "(sampling/sampling_logp_difference/*)",
        "mismatch/p999": "the 99.9th percentile of |old_per_token_logps - "
        "sampling_per_token_logps| (TRL logs its mean and max only)",
        "capped_frac": "the share of completion tokens whose importance ratio reached "
        "vllm_importance_sampling_cap (TRL logs the ratio's min, mean and max only)",
        "public_hidden_gap": "a second reward function on the public tests, logged beside "
        "the hidden-test one (rewards/<func>/mean), and their difference",
        "len_failure_p50": "completion-length percentiles split by reward (failures apart "
        "from successes), e.g. with log_metric from a reward function",
        "eval/heldout_pass": "an eval_dataset of held-out tasks with eval_strategy='steps' "
        "(eval_reward)",
        "malformed_per_episode": "tools= (tools/failure_frequency), or a reward function that "
        "counts unparsable calls",
        "immediate_submit_frac": "the share of episodes whose first call ends them, from the "
        "environment",
        "masked_in_non_policy_share": "the share of loss-masked-in tokens that the policy did "
        "not generate (tool output), per batch",
        "pass/": "a per-family pass rate (one reward function or log_metric per task family)",
    },
    "verl": {
        "degenerate_frac": "the share of groups (uid) whose scores are all equal; DAPO's "
        "filter_groups drops them but verl does not log the share",
        "kl/mu_k3": "algorithm.rollout_correction with actor_rollout_ref.rollout."
        "calculate_log_probs=True (rollout_corr/k3_kl)",
        "kl/mu_absq99": "the 99th percentile of |old_log_probs - rollout_log_probs| over "
        "response tokens (rollout_corr/ logs means, the IS ratio's max and exceedance)",
        "mismatch/mean": "the token mean of |old_log_probs - rollout_log_probs| "
        "(rollout_corr/ logs log-ppl differences per sequence, not per token)",
        "mismatch/p999": "the 99.9th percentile of |old_log_probs - rollout_log_probs| over "
        "response tokens",
        "capped_frac": "algorithm.rollout_correction.rollout_is=token with "
        "calculate_log_probs=True (rollout_corr/rollout_is_ratio_fraction_high)",
        "public_hidden_gap": "arl's agent loop with trainer.test_freq > 0 "
        "(val-aux/<source>/public_hidden_gap/mean@N), or the public-test score beside the "
        "hidden-test score in the reward function's extra info, and their difference",
        "len_failure_p50": "response-length percentiles for responses with score 0 apart "
        "from those with score 1",
        "eval/heldout_pass": "data.val_files of held-out tasks with trainer.test_freq > 0 "
        "(val-core/<source>/acc/mean@N)",
        "malformed_per_episode": "arl's agent loop with trainer.test_freq > 0 "
        "(val-aux/<source>/malformed_per_episode/mean@N), or the unparsable tool calls per "
        "episode from your agent loop",
        "immediate_submit_frac": "arl's agent loop with trainer.test_freq > 0 "
        "(val-aux/<source>/immediate_submit_frac/mean@N), or the share of episodes whose first "
        "call ends them",
        "masked_in_non_policy_share": "the share of response_mask=1 tokens that the tool or "
        "environment produced (multi-turn agent loops mask tool output)",
        "pass/": "a per-family score (one val data source per task family, or per-family "
        "acc from the reward function)",
    },
}
TO_LOG["arl"] = {
    "masked_in_non_policy_share": "the share of masked-in targets the policy did not emit "
    "(train pg does not log it; collate's check_batch refuses such a mask, and arl reproduce "
    "problem 28 measures it)",
    "pass/": "per-family pass rates: an environment whose summary reports them "
    "(bugfix-leaky writes pass/FAMILY and canary_pass each step)",
    "eval/heldout_pass": "--set eval_every=N (eval/heldout_pass beside eval/train_pass)",
}
for _hints in TO_LOG.values():
    _hints.setdefault(
        "canary_pass", "the pass rate of a canary task whose only solution is in a leaked place"
    )
TO_LOG["trl"]["kl/ref_k3"] = "beta > 0 (TRL loads the reference model and logs kl, a k3)"
TO_LOG["verl"]["kl/ref_k3"] = (
    "actor_rollout_ref.actor.use_kl_loss=True with kl_loss_type=low_var_kl (actor/kl_loss), "
    "or algorithm.use_kl_in_reward=True (actor/reward_kl_penalty)"
)
for _source in ("trl", "verl"):
    TO_LOG[_source]["eval/heldout_reward"] = TO_LOG[_source]["eval/heldout_pass"]
TO_LOG["trl"]["tool_failure_frac"] = TO_LOG["trl"]["malformed_per_episode"]
TO_LOG["trl"]["len_mean"] = "completions/mean_length (GRPOTrainer logs it by default)"
TO_LOG["verl"]["len_mean"] = "response_length/mean (verl logs it by default)"
TO_LOG["trl"]["tool_calls_per_episode"] = (
    "tools= or environment_factory= (GRPOTrainer then logs tools/call_frequency)"
)
TO_LOG["verl"]["tool_calls_per_episode"] = (
    "a multi-turn agent loop with tools (tool_call_counts/mean; arl's agent loop reports it)"
)
TO_LOG["trl"]["reward_std"] = "reward_std (GRPOTrainer logs it by default)"
TO_LOG["verl"]["reward_std"] = TO_LOG["verl"]["degenerate_frac"]
PG_RECIPES = ("pg", "distill", "unknown")
# the KL to the reference: arl train pg computes it only with a KL term (PGConfig.kl)
REF_KL = ("kl/ref_k3", "kl/ref_k1", "kl/ref_absq99")


def arl_hint(recipe: str, name: str = "", config: dict | None = None) -> str:
    """What an arl run lacking a PG metric should do: `arl train pg` logs it each step (the
    KL to the reference only with a KL term, which the run's config may say is off)."""
    if recipe not in PG_RECIPES:
        return f"this {recipe} run samples no RL groups; arl train pg logs it each step"
    if name in REF_KL:
        kl = (config or {}).get("kl")
        if kl == "off":
            return (
                "this run's config has kl=off, so no KL to the reference was computed; "
                "arl train pg logs it each step with a KL term (--set kl=k3 --set kl_beta=B)"
            )
        if kl is None:
            return (
                "arl train pg logs it each step with a KL term (--set kl=k3); its default, "
                "kl=off, logs none"
            )
    return "arl train pg logs it each step (an older or hand-made log lacks it)"


def map_name(source: str, name: str) -> str | None:
    """The arl name for one of `source`'s metric names (None: arl has none)."""
    if source == "arl":
        return name
    table = TABLES[source]
    if name in table:
        return table[name]
    if source == "verl":
        m = VERL_VALIDATION.match(name)
        if m:
            return VERL_VALIDATION_NAME.get(m.group(1))
    return None


def specific(source: str, name: str) -> str | None:
    """The table's hint for `name` in `source` (a family prefix such as "pass/" too)."""
    hints = TO_LOG.get(source, {})
    return hints.get(name) or hints.get(name.split("/")[0] + "/")


def to_log(source: str, name: str, recipe: str = "pg", config: dict | None = None) -> str:
    """What to log in `source` to get arl's `name` (for arl, as the run's config has it)."""
    generic = arl_hint(recipe, name, config) if source == "arl" else f"log {name} per step"
    return specific(source, name) or generic
