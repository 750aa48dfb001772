"""The old path of BugFix's package (arl.bugfix since issue 44), kept so that code written
against it still imports: the reproductions under arl/experiments (whose rule locks fingerprint
their modules' code, imports included), users' scripts, and pickles that name `arl.gym.*`.

`arl.gym` re-exports arl.bugfix's names, and each of its old submodules is the module it
became, the same object (`arl.gym.env is arl.bugfix.env`, `arl.gym.harness is
arl.envkit.harness`), loaded on first import by a finder on sys.meta_path. `EnvConfig` is
`BugFixConfig`. New code imports arl.bugfix and arl.envkit.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

from arl.bugfix import *  # noqa: F403 (the old package's names)
from arl.bugfix import __all__ as __all__

# every submodule arl.gym had -> the module it is now (arl.envkit: the pieces any environment
# may share; the rest stayed BugFix's)
MOVED = {
    "check": "arl.bugfix.check",
    "env": "arl.bugfix.env",
    "environment": "arl.bugfix.environment",
    "exploits": "arl.envkit.exploits",
    "families": "arl.envkit.families",
    "fresh": "arl.bugfix.fresh",
    "grammar": "arl.bugfix.grammar",
    "gymnasium_env": "arl.bugfix.gymnasium_env",
    "harness": "arl.envkit.harness",
    "judge": "arl.bugfix.judge",
    "judged": "arl.bugfix.judged",
    "leak": "arl.bugfix.leak",
    "leak_policies": "arl.bugfix.leak_policies",
    "leak_tasks": "arl.bugfix.leak_tasks",
    "naming": "arl.envkit.naming",
    "policies": "arl.bugfix.policies",
    "tasks": "arl.bugfix.tasks",
}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports `arl.gym.NAME` as the module it moved to: sys.modules holds that very module
    under both names, with its own __spec__ (the import system sets the alias's, put back)."""

    def __init__(self) -> None:
        self.own_specs: dict[str, object] = {}  # alias name -> the module's own spec

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001
        prefix, _, name = fullname.rpartition(".")
        if prefix != __name__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec) -> ModuleType:  # noqa: ANN001
        module = importlib.import_module(MOVED[spec.name.rpartition(".")[2]])
        self.own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.own_specs.pop(module.__spec__.name)  # its own, not the alias's


if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
    sys.meta_path.insert(0, _OldPaths())
