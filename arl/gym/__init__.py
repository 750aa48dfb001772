"""The BugFix gym: its language (grammar.py), its data (families.py), the tasks (tasks.py,
naming.py, harness.py), the environment (env.py), scripted policies and the exploit detector.

The gym speaks words and imports nothing above it: arl.text renders its words as ids."""

from arl.gym.env import BugFixEnv, EnvConfig
from arl.gym.families import FAMILIES, SPLITS
from arl.gym.tasks import Task, all_tasks, get_task, tasks_for

__all__ = [
    "BugFixEnv",
    "EnvConfig",
    "FAMILIES",
    "SPLITS",
    "Task",
    "all_tasks",
    "get_task",
    "tasks_for",
]
