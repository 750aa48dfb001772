"""The BugFix gym: its language (grammar.py), the tasks (tasks.py), the environment (env.py),
scripted policies, and its variants for Problems 10, 11 and 23 (judged.py, leak.py, fresh.py).

The pieces any environment may share are in arl.envkit: the bug families and their names
(families.py, naming.py), the test harness (harness.py), the exploit detector (exploits.py)
and the Gymnasium wrapper (gymnasium_env.py). The gym speaks words; arl.text renders them as
ids. `BUGFIX` (environment.py) is the gym as an environment of the protocol (arl.env), which is
all rollouts and trainers see of it. This package was arl.gym (issue 44), a path that still
imports (arl/gym/__init__.py)."""

from arl.bugfix.env import BugFixConfig, BugFixEnv, BugFixOutcome, EnvConfig
from arl.bugfix.environment import BUGFIX, default_vocab
from arl.bugfix.tasks import Task, all_tasks, get_task, tasks_for
from arl.envkit.families import FAMILIES, SPLITS

__all__ = [
    "BUGFIX",
    "BugFixConfig",
    "BugFixEnv",
    "BugFixOutcome",
    "EnvConfig",
    "default_vocab",
    "FAMILIES",
    "SPLITS",
    "Task",
    "all_tasks",
    "get_task",
    "tasks_for",
]
