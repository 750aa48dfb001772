"""The BugFix gym: tasks, the environment, scripted policies and the exploit detector."""

from arl.gym.env import BugFixEnv, EnvConfig
from arl.gym.tasks import FAMILIES, SPLITS, Task, all_tasks, get_task, tasks_for

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
