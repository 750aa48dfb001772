"""Bridges: arl's environments inside other trainers, with arl's verdict as the reward.

- arl.bridges.episode: one episode driven by function-calling tools (what both bridges share).
- arl.bridges.trl: TRL's GRPOTrainer (`environment_factory`, `grpo_dataset`).
- arl.bridges.verl: a verl agent loop (`ArlAgentLoop`) and the dataset rows it reads.

Each trainer imports only where it is used: `import arl.bridges` needs neither.
"""
