"""Problem 11 probe: what the weak base (sealed) does on the canary tasks of the leaky variant."""

from collections import Counter

from arl.env import get_environment
from arl.eval.metrics import run_policy
from arl.rollout import vocab_of
from arl.train.bases import BaseConfig, weak_base

m = weak_base(BaseConfig(seed=0), "bugfix-sealed")
E = get_environment("bugfix-leaky")
V = vocab_of(E)
tasks = [t for t in E.tasks("train") if t.family == "const"]
trajs = run_policy(m, tasks, samples=64, seed=5)
c = Counter()
for tr in trajs:
    calls = [" ".join(w for w in V.decode(tr.ids_T[a:b]) if w != "<end>") for a, b in tr.calls]
    c[(calls[0], calls[1][:10] if len(calls) > 1 else "")] += 1
    if tr.passed:
        c["PASSED"] += 1
    if calls[0] == "log" and len(calls) > 1 and calls[1].startswith("edit const"):
        c["log+const"] += 1
print(c.most_common(25))
print("--- log then const: the call, the log's first digits, the listing's")
for tr in trajs:
    ws = V.decode(tr.ids_T)
    calls = [" ".join(w for w in V.decode(tr.ids_T[a:b]) if w != "<end>") for a, b in tr.calls]
    if calls[0] in ("log", "read") and len(calls) > 1 and calls[1].startswith("edit const"):
        obs = V.decode(tr.ids_T[tr.calls[0][1] : tr.calls[1][0]])
        digs = [w for w in obs if w in "123456789" and len(w) == 1]
        print(calls[0], calls[1], digs[:2], digs[2:4])
