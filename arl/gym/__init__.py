"""The BugFix gym: its language (grammar.py), its data (families.py), the tasks (tasks.py,
naming.py, harness.py), the environment (env.py), scripted policies and the exploit detector.

The gym speaks words; arl.text renders them as ids. `BUGFIX` (environment.py) is the gym as
an environment of the protocol (arl.env), which is all rollouts and trainers see of it."""

from arl.gym.env import BugFixEnv, BugFixOutcome, EnvConfig
from arl.gym.environment import BUGFIX, default_vocab
from arl.gym.families import FAMILIES, SPLITS
from arl.gym.tasks import Task, all_tasks, get_task, tasks_for

__all__ = [
    "BUGFIX",
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
