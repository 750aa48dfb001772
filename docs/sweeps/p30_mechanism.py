"""Problem 30's mechanism measurements (adopt_demo.advantage_ratio_gap and first_update_gap)
on seeds 0-3 at full settings, run beside `arl adopt`'s demonstration (which measures the
same pairs Problem 30's main claim reads); prints one JSON line per seed."""

import json
import sys
import time

from arl.experiments.problems.adopt_demo import advantage_ratio_gap, first_update_gap
from arl.experiments.problems.common import Ctx, set_threads

set_threads()
for seed in map(int, sys.argv[1:] or ["0", "1", "2", "3"]):
    t0 = time.perf_counter()
    ctx = Ctx(30, False, seed)
    gap, groups = advantage_ratio_gap(ctx)
    update = first_update_gap(ctx)
    print(
        json.dumps(
            {
                "seed": seed,
                "scale_gap": gap,
                "mixed_groups": groups,
                "update_gap": update,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        ),
        flush=True,
    )
