"""The package's layers: no module imports one from a higher layer, and no import runs in a circle.

Every `import` in arl/**/*.py is read with ast (those inside functions too), so a lazy import
that climbs is caught as surely as one at the top of a file. Names looked up at run time are not
imports and are not checked: env.REGISTRY's "arl.bugfix.environment:BUGFIX" strings are how the
protocol finds its implementations without importing them.
"""

import ast
from pathlib import Path

import arl

ROOT = Path(arl.__file__).parent

# The layers, lowest first, by the name under arl/ (a module or a package, every file in it).
# A module may import its own layer and the ones below it, never one above: data flows up from
# the environment to the command line, and each layer can be read and tested without the ones
# above it. The command line, the top, may import anything; nothing below it imports it.
LAYERS = (
    # the words every layer shares: data types, errors, checks, the vocabulary, run files
    "__init__ types errors checks text tools runio progress parallel logging_bridge",
    "env",  # the environment protocol
    "sandbox",  # where policy-written code runs (bubblewrap, warm workers, verdicts)
    # what environments are built from, none in particular (harness, families, the grader that
    # runs an environment's code in the sandbox, ...)
    "envkit",
    "bugfix gym codefix",  # its environments (arl.gym: BugFix's old path)
    # policies, episodes, losses; files of episodes both ways (export, data)
    "model hf sampling rollout rollout_workers batch losses export data",
    "bridges",  # the environments inside other trainers (TRL, verl)
    "eval calc sim doctor testing",  # measuring: metrics, statistics, calculators, simulator,
    # doctor, and the check of an environment against the protocol
    "train",  # one loop per recipe, the starting policies, checkpoints
    "experiments",  # the reproductions
    "cli __main__",  # the `arl` command
)
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names.split()}


def module_name(path: Path) -> str:
    """arl/train/pg.py -> arl.train.pg; a package's __init__.py is the package."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer_of(module: str) -> int:
    """The layer of arl.NAME... by NAME (the package itself: "__init__")."""
    parts = module.split(".")
    return LAYER[parts[1] if len(parts) > 1 else "__init__"]


def imported(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The arl modules one import statement loads: `from P import m` is P.m when m is a module."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package (a package is its own)
        package = module.split(".")
        package = package if FILES[module].name == "__init__.py" else package[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in FILES else base for a in node.names]


def imports(module: str) -> list[tuple[str, bool, int]]:
    """(imported arl module, at module level, line) for every import in the module's file."""
    tree = ast.parse(FILES[module].read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                for name in imported(module, child):
                    if name == "arl" or name.startswith("arl."):
                        found.append((name, top, child.lineno))
            inner = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, top and not inner)

    visit(tree, True)
    return found


def test_the_walker_sees_top_level_lazy_and_relative_imports():
    pg = imports("arl.train.pg")
    assert ("arl.train.checkpoint", True) in {(m, top) for m, top, _ in pg}  # from arl.train import
    groups = imports("arl.train.pg_groups")
    assert ("arl.rollout_workers", False) in {(m, top) for m, top, _ in groups}  # in a function
    runner = imports("arl.sandbox.runner")  # from .child import ..., in a try at the top
    assert ("arl.sandbox.child", True) in {(m, top) for m, top, _ in runner}


def test_the_sandbox_is_a_layer_below_what_environments_are_built_from():
    """envkit's grader runs code in the sandbox; the sandbox knows no environment."""
    assert layer_of("arl.sandbox.pool") < layer_of("arl.envkit.graded") < layer_of("arl.codefix")
    assert ("arl.sandbox", True) in {(m, top) for m, top, _ in imports("arl.envkit.graded")}
    assert not [
        t
        for m in FILES
        if m.startswith("arl.sandbox")
        for t, _, _ in imports(m)
        if not t.startswith(("arl.sandbox", "arl.errors"))
    ]


def test_every_module_has_a_layer():
    names = {m.split(".")[1] if "." in m else "__init__" for m in FILES}
    assert not names - set(LAYER), "place each of these in LAYERS"


def test_no_module_imports_a_higher_layer():
    climbs = [
        f"{FILES[m].relative_to(ROOT.parent)}:{line} imports {target} "
        f"(layer {layer_of(target)} above {layer_of(m)})"
        for m in FILES
        for target, _, line in imports(m)
        if target in FILES and layer_of(target) > layer_of(m)
    ]
    assert not climbs, "\n".join(climbs)


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph as [a, b, ..., a], or None (depth-first, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finds_a_loop_and_only_a_loop():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_lazy_imports_included():
    """A lazy import in a circle still ties the modules into one unit (hf's chat, template check
    and policy were one until the transformers helpers moved to arl.hf.deps)."""
    graph = {m: {t for t, _, _ in imports(m) if t in FILES and t != m} for m in FILES}
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_no_import_cycle_at_module_level():
    graph = {m: {t for t, top, _ in imports(m) if top and t in FILES and t != m} for m in FILES}
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found)


# The environments' packages: only the environment's own package, the reproductions and the
# command line import one. Everything else (rollouts, trainers, evaluation, hf, the bridges,
# envkit) reaches an environment through arl.env's registry, and one environment's package
# never imports another's (what two share is in arl.envkit). arl.gym is BugFix's old path.
ENV_PACKAGES = {"bugfix": "bugfix", "gym": "bugfix", "codefix": "codefix"}  # name -> whose
MAY_IMPORT_ENVIRONMENTS = ("experiments", "cli")
# (module, imported module): what is left, each with its reason
ALLOWED = {
    # Problem 14's rule lock fingerprints this module's code, imports included
    # (arl/experiments/problems/freeform.py: code_sha256(["arl.codefix.probe"])): it keeps
    # BugFix's old path, arl.gym.grammar, whose identifier_pieces is arl.envkit.words's
    ("arl.codefix.probe", "arl.gym.grammar"),
}


def environment_imports() -> list[tuple[str, str, int]]:
    """(module, imported module, line) for each import of an environment's package by a module
    outside it (experiments and cli aside)."""
    found = []
    for m in FILES:
        parts = m.split(".")
        top = parts[1] if len(parts) > 1 else "__init__"
        if top in MAY_IMPORT_ENVIRONMENTS:
            continue
        for target, _, line in imports(m):
            tparts = target.split(".")
            theirs = ENV_PACKAGES.get(tparts[1]) if len(tparts) > 1 else None
            if theirs is not None and theirs != ENV_PACKAGES.get(top):
                found.append((m, target, line))
    return found


def test_no_module_outside_an_environment_imports_its_package():
    found = environment_imports()
    bad = [
        f"{FILES[m].relative_to(ROOT.parent)}:{line} imports {target}"
        for m, target, line in found
        if (m, target) not in ALLOWED
    ]
    assert not bad, "reach it through arl.env.get_environment:\n" + "\n".join(bad)
    stale = ALLOWED - {(m, t) for m, t, _ in found}
    assert not stale, f"allowed but no longer imported (take them off ALLOWED): {stale}"


def test_the_environment_import_check_sees_one():
    found = {(m, t) for m, t, _ in environment_imports()}
    assert ("arl.codefix.probe", "arl.gym.grammar") in found  # an environment importing another
    # the reproductions import BugFix's old path (left as they are: their rule locks), let through
    assert ("arl.experiments.ch15", True) in {
        (m, t == "arl.gym") for m in FILES for t, _, _ in imports(m)
    }
    assert not [m for m, _ in found if m.startswith(("arl.experiments.", "arl.cli."))]
