"""A fresh split of BugFix (Problem 23): new functions of the five families, built after the fact.

The book's fresh set is tasks built last month from the same repositories: the same families,
functions no training set and no public benchmark has held. Here: four new functions per family
(20 tasks), each a new combination of what the gym's listings already say (ops, constants,
loop shapes), so every word of every fresh listing is already a word of the gym
(`gym_words`), and TinyAgent's vocabulary, the 30 BugFix tasks and every number measured on
them stay as they were. The module adds nothing to the gym; it only builds tasks from its parts.

Names are VERB_VERB (`build_handle`): both pieces are the gym's name pieces, and no BugFix name
has this form, so a fresh name shares no name's piece set (every VERB_NOUN pair is taken: the
30 tasks use all 6 x 5), and, as for the held-out names, voting on its pieces guesses no better
than chance (`arl.envkit.naming.piece_vote_guess`).
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from functools import cache

from arl.bugfix.grammar import source_words
from arl.bugfix.tasks import Task, all_tasks, gym_words, tasks_for
from arl.envkit.families import FAMILIES, NAME_VERBS, Template, inject_bug
from arl.envkit.harness import generate_tests
from arl.envkit.naming import piece_vote_guess

FRESH = "fresh"  # the split's name (a Task's `split`; not one of the gym's SPLITS)
RENAMED = "renamed"  # the held-out tasks under fresh-form names (the name-form control)

# Four functions per family, as correct listings; `inject_bug` makes them buggy. The rule: each
# combines statements the family's own listings (train and held-out) already use, in a new way
# (sum_even: count_even's filter with sum_list's sum), and keeps every family's cue exclusive to
# it, as in the gym. A first draft with things no listing has (a constant 3, `t >= x`) was
# replaced by this rule before any contamination arm ran (docs: Problem 23).
# fmt: off
FRESH_TEMPLATES: tuple[Template, ...] = (
    # --- init ---
    Template("init", FRESH, ("xs",), """
        def sum_even(xs):
            acc = 0
            for x in xs:
                if x % 2 == 0:
                    acc += x
            return acc
    """),
    Template("init", FRESH, ("xs",), """
        def sum_odd(xs):
            total = 0
            for x in xs:
                if x % 2 != 0:
                    total += x
            return total
    """),
    Template("init", FRESH, ("xs",), """
        def square_odd(xs):
            acc = 0
            for x in xs:
                if x % 2 != 0:
                    acc += x * x
            return acc
    """),
    Template("init", FRESH, ("xs",), """
        def double_nonzero(xs):
            total = 0
            for x in xs:
                if x != 0:
                    total += 2 * x
            return total
    """),
    # --- range ---
    Template("range", FRESH, ("xs",), """
        def copy_even_index(xs):
            out = []
            for i in range(len(xs)):
                if i % 2 == 0:
                    out.append(xs[i])
            return out
    """),
    Template("range", FRESH, ("xs",), """
        def sum_by_index(xs):
            total = 0
            for i in range(len(xs)):
                total += xs[i]
            return total
    """),
    Template("range", FRESH, ("xs",), """
        def sum_squares_index(xs):
            total = 0
            for i in range(len(xs)):
                total += xs[i] * xs[i]
            return total
    """),
    Template("range", FRESH, ("xs",), """
        def double_even_index(xs):
            out = []
            for i in range(len(xs)):
                if i % 2 == 0:
                    out.append(2 * xs[i])
            return out
    """),
    # --- compare ---
    Template("compare", FRESH, ("xs", "t"), """
        def double_at_most(xs, t):
            out = []
            for x in xs:
                if x <= t:
                    out.append(2 * x)
            return out
    """),
    Template("compare", FRESH, ("xs", "t"), """
        def sum_doubled_at_least(xs, t):
            total = 0
            for x in xs:
                if x >= t:
                    total += 2 * x
            return total
    """),
    Template("compare", FRESH, ("xs", "t"), """
        def square_at_least(xs, t):
            out = []
            for x in xs:
                if x >= t:
                    out.append(x * x)
            return out
    """),
    Template("compare", FRESH, ("xs", "t"), """
        def sum_squares_at_most(xs, t):
            total = 0
            for x in xs:
                if x <= t:
                    total += x * x
            return total
    """),
    # --- minmax ---
    Template("minmax", FRESH, ("xs", "t"), """
        def sum_floored(xs, t):
            total = 0
            for x in xs:
                total += max(x, t)
            return total
    """),
    Template("minmax", FRESH, ("xs", "t"), """
        def sum_capped(xs, t):
            total = 0
            for x in xs:
                total += min(x, t)
            return total
    """),
    Template("minmax", FRESH, ("xs", "t"), """
        def largest_or_bound(xs, t):
            best = t
            for x in xs:
                best = max(best, x)
            return best
    """),
    Template("minmax", FRESH, ("xs", "t"), """
        def smallest_or_bound(xs, t):
            best = t
            for x in xs:
                best = min(best, x)
            return best
    """),
    # --- div ---
    Template("div", FRESH, ("xs", "t+"), """
        def sum_over(xs, t):
            total = 0
            for x in xs:
                total += x
            return total / t
    """),
    Template("div", FRESH, ("xs+",), """
        def mean_squares(xs):
            total = 0
            for x in xs:
                total += x * x
            return total / len(xs)
    """),
    Template("div", FRESH, ("xs",), """
        def halve_squares(xs):
            out = []
            for x in xs:
                out.append(x * x / 2)
            return out
    """),
    Template("div", FRESH, ("xs",), """
        def sum_halves(xs):
            total = 0
            for x in xs:
                total += x / 2
            return total
    """),
)
# fmt: on


def names_at_chance(names: dict[str, str]) -> bool:
    """Fresh names (name -> family) say nothing of the family: piece votes over the training
    names hit no more often than chance, as for the held-out names."""
    train = {t.name: t.family for t in tasks_for("train")}
    hits = sum(piece_vote_guess(n, train)[f] for n, f in names.items())
    return hits <= len(names) / len(FAMILIES)


@cache
def fresh_names() -> dict[str, str]:
    """About -> VERB_VERB for every fresh template: the first seeded draw (`arl-fresh-ATTEMPT`)
    of distinct pairs whose piece votes are at chance."""
    pairs = [f"{a}_{b}" for a in NAME_VERBS for b in NAME_VERBS if a != b]
    for attempt in range(10_000):
        drawn = random.Random(f"arl-fresh-{attempt}").sample(pairs, len(FRESH_TEMPLATES))
        if names_at_chance({n: t.family for n, t in zip(drawn, FRESH_TEMPLATES, strict=True)}):
            return {t.about: n for t, n in zip(FRESH_TEMPLATES, drawn, strict=True)}
    raise RuntimeError("no fresh name draw passes the shortcut check")


@cache
def fresh_tasks() -> tuple[Task, ...]:
    """The 20 fresh tasks (split "fresh"), family by family, as BugFix plays them."""
    names, out = fresh_names(), []
    for t in FRESH_TEMPLATES:
        correct = t.source.replace(f"def {t.about}(", f"def {names[t.about]}(")
        buggy = inject_bug(t.family, correct)
        public, hidden = generate_tests(f"fresh-{t.about}", t.kinds, correct, buggy)
        out.append(Task(names[t.about], t.family, FRESH, buggy, correct, public, hidden, t.about))
    return tuple(out)


def with_name(task: Task, name: str) -> Task:
    """The same function under another name (the issue and the listing's `def` line)."""
    old = f"def {task.name}("
    new = f"def {name}("
    return replace(
        task,
        name=name,
        buggy_source=task.buggy_source.replace(old, new, 1),
        correct_source=task.correct_source.replace(old, new, 1),
    )


@cache
def renamed_heldout() -> tuple[Task, ...]:
    """The 10 held-out tasks under fresh-form names (VERB_VERB pairs no fresh task uses; split
    "renamed"): the control that says what the name form alone costs a policy, apart from the
    fresh listings."""
    used = set(fresh_names().values())
    pairs = [
        f"{a}_{b}" for a in NAME_VERBS for b in NAME_VERBS if a != b and f"{a}_{b}" not in used
    ]
    held = tasks_for("heldout")
    for attempt in range(10_000):
        drawn = random.Random(f"arl-renamed-{attempt}").sample(pairs, len(held))
        if names_at_chance({n: t.family for n, t in zip(drawn, held, strict=True)}):
            return tuple(
                replace(with_name(t, n), split=RENAMED) for t, n in zip(held, drawn, strict=True)
            )
    raise RuntimeError("no renamed draw passes the shortcut check")


def unknown_words(tasks: tuple[Task, ...]) -> set[str]:
    """Words of the tasks' issues and listings (buggy and correct) that the gym does not know:
    empty for a split that leaves TinyAgent's vocabulary as it is."""
    words = set()
    for t in tasks:
        words |= {*source_words(t.correct_source), *source_words(t.buggy_source)}
    return words - set(gym_words())


def body(task: Task) -> str:
    """A task's correct listing without its name and with its accumulator called ACC: what
    two tasks share when one is the other renamed."""
    lines = task.renamed("acc").correct_source.splitlines()[1:]
    return re.sub(r"\bacc\b", "ACC", "\n".join(lines))


def shared_with_gym(tasks: tuple[Task, ...]) -> set[str]:
    """The tasks whose name or listing (up to names) is one of BugFix's 30 (empty for a fresh
    split)."""
    names, bodies = {t.name for t in all_tasks()}, {body(t) for t in all_tasks()}
    return {t.name for t in tasks if t.name in names or body(t) in bodies}
