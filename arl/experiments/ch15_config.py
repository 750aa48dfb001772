"""Chapter 15's settings: one frozen config, defaults the book's, and its --quick preset."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from arl.train.bases import BaseConfig
from arl.train.dpo import DPOConfig
from arl.train.pg_config import PGConfig, minimal_reinforce
from arl.train.rft import RFTConfig


@dataclass(frozen=True)
class Ch15Config:
    """Everything the chapter's experiments use. Defaults are the book's settings."""

    base: BaseConfig = field(default_factory=BaseConfig)  # weak base and oracle SFT
    eval_samples: int = 12  # episodes per task per evaluation (240 train, 120 held-out: SE < 0.05)
    sft_eval_every: int = 10  # oracle-SFT evaluation interval, in steps
    identity_samples: int = 4  # episodes per training task for the gradient identity (80)
    rft: RFTConfig = field(default_factory=RFTConfig)  # expert iteration, hidden-test filter
    public_rft_rounds: int = 3  # rounds of RFT with the public-test filter
    dpo_samples: int = 16  # weak-base episodes per training task to build DPO pairs from
    dpo: DPOConfig = field(default_factory=DPOConfig)
    dpo_eval_every: int = 25
    # Section 15.5's minimal REINFORCE (G=8 episodes on each of 8 tasks a step), its `steps`
    # those of RL from the weak base; each arm sets its own seed
    rl: PGConfig = field(default_factory=lambda: minimal_reinforce(lr=2e-4, steps=60))
    rl_steps_cold: int = 40  # RL steps after the cold-start SFT checkpoint
    rl_eval_every: int = 10
    group_probe: int = 8  # G, episodes per group when counting mixed-outcome groups
    group_probe_groups: int = 10  # groups per held-out task (100 groups: SE <= 0.05)

    def quick(self) -> Ch15Config:
        """A reduced run for tests: same sections, far fewer steps and samples (RL: the one
        --quick preset, PGConfig.quick, for both arms)."""
        rl = self.rl.quick()
        return replace(
            self,
            base=self.base.quick(),
            eval_samples=1,
            sft_eval_every=10,
            identity_samples=2,
            rft=replace(self.rft, rounds=2, samples_per_task=4, steps_per_round=5),
            public_rft_rounds=2,
            dpo_samples=4,
            dpo=replace(self.dpo, steps=10),
            dpo_eval_every=5,
            rl=rl,
            rl_steps_cold=rl.steps,
            rl_eval_every=2,
            group_probe=4,
            group_probe_groups=1,
        )
