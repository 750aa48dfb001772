"""Closed-form sizing of a rollout fleet (Appendix B, Problem 18): what the simulator checks.

Little's law gives the episodes in flight, L = lambda W, from the episodes a step needs per
minute and the time W of one episode; the KV cache of those episodes at full context bounds
the inference fleet's memory.
"""

from __future__ import annotations

import math

from arl import calc


def fleet_sizing(
    turns: float,
    tokens_per_turn: float,
    decode_tps: float,
    tool_s: float,
    startup_s: float,
    episodes_per_step: int,
    step_min: float,
    context: float,
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    bytes_per_elem: float,
    pool_factor: float,
) -> dict[str, float]:
    """Episode time, episodes in flight, warm pool and KV-cache bytes of a fleet."""
    w = calc.episode_seconds(turns, tokens_per_turn, decode_tps, tool_s, startup_s)
    in_flight = calc.episodes_in_flight(episodes_per_step, step_min * 60.0, w)
    per_tok = calc.kv_bytes_per_token(n_layers, n_kv_heads, d_head, bytes_per_elem)
    full = calc.kv_fleet_bytes(math.ceil(in_flight), context, per_tok)
    return {
        "episode_min": w / 60.0,
        "episodes_in_flight": in_flight,
        "warm_pool": pool_factor * in_flight,
        "kv_bytes_per_token": per_tok,
        "kv_fleet_bytes_full_context": full,
        "kv_fleet_bytes_mean_context": full / 2,  # context grows about linearly
    }
