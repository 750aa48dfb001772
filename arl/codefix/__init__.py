"""CodeFix: free-form replace edits on real Python modules, graded in a sandbox (Problem 14).

The book's default environment for real work, beside the BugFix gym's menu of edit ops: the
same five bug families and splits (and two more no menu op can fix), each task a real module
with real tests; tools `read`, `test`, `replace OLD with NEW`, `submit`; policy code runs only
in the sandbox (arl.sandbox). `CODEFIX` (environment.py) is all rollouts and trainers see.
"""

from arl.codefix.env import CodeFixConfig, CodeFixEnv, CodeFixOutcome
from arl.codefix.environment import CODEFIX
from arl.codefix.tasks import CodeFixTask, all_tasks, get_task, tasks_for

__all__ = [
    "CODEFIX",
    "CodeFixConfig",
    "CodeFixEnv",
    "CodeFixOutcome",
    "CodeFixTask",
    "all_tasks",
    "get_task",
    "tasks_for",
]
