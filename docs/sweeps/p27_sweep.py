"""Problem 27's one choice of turn budget (EpisodeConfig max_turns), made once on seed 0.

The sequence-mean arm (the one whose failures should grow) from the weak base, 60 steps,
probed every 5 steps as in arl/experiments/problems/length.py, at max_turns 6 (the default)
and 12 (24 was planned and dropped: one arm at 12 already took 4-20 min on the shared cores).

The rule, as first written before running: "the smallest budget at which the failures' p90
length never reaches the budget's token ceiling L_max = max_turns x max_call_tokens". It was
mis-specified: the ceiling an episode hits is the turn budget, not L_max (a truncated
episode has max_turns calls of 2-4 tokens, so its length stays under L_max even when every
failure is truncated: at 6 turns p90 peaked at 21 < 24 while 72% of episodes were cut).
The rule used, revised after seeing the 6-turn run and before the 12-turn one finished:
the smallest budget at which the truncation share stays at or below 0.5 at every probe
(most episodes end before the ceiling, so the ceiling does not cap the growth); the
smallest, because a larger one only costs time.
Run: ARL_THREADS=1 python docs/sweeps/p27_sweep.py 6 12 > docs/sweeps/p27_sweep.log
"""

import sys
import time

from arl.bugfix.tasks import tasks_for
from arl.experiments.problems import length
from arl.experiments.problems.common import Ctx, rl_config, set_threads, start
from arl.train.pg import train_pg

set_threads()
ctx = Ctx(number=27, quick=False, seed=0)
budgets = [int(x) for x in sys.argv[1:]] or [6, 12]
for turns in budgets:
    config = rl_config(ctx, env={"max_turns": turns}, aggregation="seq_mean_token_mean", steps=60)
    t0 = time.perf_counter()
    h = train_pg(
        start(ctx, "weak"),
        config,
        tasks_for("train"),
        hook=length.probe_hook(ctx, config.env),
        hook_every=length.HOOK_EVERY,
    )
    probes = [r for r in h if "probe/n" in r]
    p90 = [r["probe/fail_len_p90"] for r in probes]
    print(
        f"max_turns {turns} (L_max {config.l_max}): {time.perf_counter() - t0:.0f} s; failure "
        f"growth {length.growth(h):+.2f} tokens; max failure p90 {max(p90):.1f} "
        f"({'reaches' if max(p90) >= config.l_max else 'below'} L_max); max truncated share "
        f"{max(r['probe/truncated'] for r in probes):.2f}"
    )
    for r in probes:
        print(
            f"  step {r['step']:3d} pass {r['probe/pass_rate']:.2f} fail mean "
            f"{r['probe/fail_len']:.1f} p90 {r['probe/fail_len_p90']:.1f} calls "
            f"{r['probe/fail_calls']:.2f} tok/call {r['probe/fail_tokens_per_call']:.2f} repeat "
            f"{r['probe/fail_repeat_share']:.2f} trunc {r['probe/truncated']:.2f}"
        )
    sys.stdout.flush()
