"""SQLFix's tasks: a correct query with one bug injected from a family, and its hidden expected
rows (the correct query's, on the public database and on each hidden one).

Families, each a bug that shows as a word the correct queries never hold (the cue):

- compare: an inclusive bound made strict (`>=` -> `>`, `<=` -> `<`);
- null: `IS NULL` written `= NULL` (and `IS NOT NULL` as `<> NULL`): true of no row;
- order: a top-k by `DESC` sorted `ASC`;
- minmax: `MAX` written `MIN`;
- andor: an `AND` written `OR`;
- join: a join on the wrong key (`orders . id` where `orders . customer_id` is meant).

Queries are written as words separated by single spaces (`tokens` splits any query that
way), so TinyAgent's words and a real model's text are one query. Task names are neutral
(ADJECTIVE_NOUN, drawn without regard to the family): the issue names the query, not its bug.

Nothing here imports arl (the task's `env` is a plain string): tasks and grading are the
environment's own.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache
from typing import ClassVar

from sqlfix import grade
from sqlfix.data import HIDDEN, PUBLIC

FAMILIES = ("compare", "null", "order", "minmax", "andor", "join")
SPLITS = ("train", "heldout")
ADJECTIVES = ("amber", "brisk", "calm", "dusty", "eager", "frosty", "gentle", "hollow", "ivory")
NOUNS = ("ledger", "digest", "roster", "tally", "report", "census")

# a query's words: quoted strings, numbers, names, two-character operators, one-character ones
_TOKEN = re.compile(r"'[^']*'|\d+(?:\.\d+)?|[A-Za-z_][\w@]*|=>|<=|>=|<>|!=|==|\|\||\S")


def tokens(sql: str) -> list[str]:
    """A query's words (`WHERE age>=30` -> WHERE age >= 30)."""
    return _TOKEN.findall(sql)


# (family, split, about, template, parameters): three templates per family, two tasks each;
# the third template of each family is held out
TEMPLATES = (
    ("compare", "train", "customers at least N years old",
     "SELECT name FROM customers WHERE age >= {} ORDER BY name", (30, 41)),
    ("compare", "train", "orders of at most N",
     "SELECT product , amount FROM orders WHERE amount <= {} ORDER BY amount , id", (12, 20)),
    ("compare", "heldout", "how many orders of at least N",
     "SELECT COUNT ( * ) FROM orders WHERE amount >= {}", (40, 60)),
    ("null", "train", "customers without an email in CITY",
     "SELECT name FROM customers WHERE email IS NULL AND city = '{}' ORDER BY name",
     ("oslo", "rome")),
    ("null", "train", "orders without a status of PRODUCT",
     "SELECT id FROM orders WHERE status IS NULL AND product <> '{}' ORDER BY id",
     ("pen", "lamp")),
    ("null", "heldout", "customers with an email in CITY",
     "SELECT name FROM customers WHERE email IS NOT NULL AND city = '{}' ORDER BY name",
     ("paris", "oslo")),
    ("order", "train", "the K oldest customers",
     "SELECT name FROM customers ORDER BY age DESC , name LIMIT {}", (2, 3)),
    ("order", "train", "the K largest orders",
     "SELECT id , amount FROM orders ORDER BY amount DESC , id LIMIT {}", (1, 3)),
    ("order", "heldout", "the oldest customer in CITY",
     "SELECT name FROM customers WHERE city = '{}' ORDER BY age DESC , name LIMIT 1",
     ("paris", "oslo")),
    ("minmax", "train", "the largest order of PRODUCT",
     "SELECT MAX ( amount ) FROM orders WHERE product = '{}'", ("book", "pen")),
    ("minmax", "train", "the oldest age in CITY",
     "SELECT MAX ( age ) FROM customers WHERE city = '{}'", ("paris", "rome")),
    ("minmax", "heldout", "the largest order per product at least N",
     "SELECT product , MAX ( amount ) FROM orders WHERE amount >= {} GROUP BY product "
     "ORDER BY product", (5, 20)),
    ("andor", "train", "customers in CITY at least N years old",
     "SELECT name FROM customers WHERE city = '{}' AND age >= 30 ORDER BY name",
     ("paris", "lyon")),
    ("andor", "train", "paid orders of PRODUCT",
     "SELECT id FROM orders WHERE product = '{}' AND status = 'paid' ORDER BY id",
     ("book", "pen")),
    ("andor", "heldout", "orders of at least N that shipped",
     "SELECT id FROM orders WHERE amount >= {} AND status = 'shipped' ORDER BY id", (12, 40)),
    ("join", "train", "who ordered what, orders of at least N",
     "SELECT customers . name , orders . product FROM orders JOIN customers ON "
     "orders . customer_id = customers . id WHERE orders . amount >= {} ORDER BY orders . id",
     (40, 60)),
    ("join", "train", "orders of customers in CITY",
     "SELECT orders . id FROM orders JOIN customers ON orders . customer_id = customers . id "
     "WHERE customers . city = '{}' ORDER BY orders . id", ("paris", "oslo")),
    ("join", "heldout", "how many orders each customer of CITY made",
     "SELECT customers . name , COUNT ( * ) FROM customers JOIN orders ON "
     "orders . customer_id = customers . id WHERE customers . city = '{}' "
     "GROUP BY customers . name ORDER BY customers . name", ("paris", "oslo")),
)  # fmt: skip

# the bug of each family: (correct words, buggy words) in order of preference; the first
# site found in the correct query is the one replaced
SITES = {
    "compare": (((">=",), (">",)), (("<=",), ("<",))),
    "null": ((("IS", "NOT", "NULL"), ("<>", "NULL")), (("IS", "NULL"), ("=", "NULL"))),
    "order": ((("DESC",), ("ASC",)),),
    "minmax": ((("MAX",), ("MIN",)),),
    "andor": ((("AND",), ("OR",)),),
    "join": ((("orders", ".", "customer_id"), ("orders", ".", "id")),),
}


def inject_bug(family: str, words: list[str]) -> list[str]:
    """The correct query's words with the family's bug put in (its first site)."""
    for old, new in SITES[family]:
        for i in range(len(words) - len(old) + 1):
            if tuple(words[i : i + len(old)]) == old:
                return [*words[:i], *new, *words[i + len(old) :]]
    raise ValueError(f"no {family} site in {' '.join(words)!r}")


@dataclass(frozen=True)
class SQLTask:
    """One query to repair: its correct form, the buggy one an episode starts from, and what
    it should return on each graded database (hidden from the policy)."""

    name: str
    family: str
    split: str
    correct: str
    buggy: str
    about: str = ""  # what the query is for (for people; never shown)
    env: ClassVar[str] = "sqlfix"

    @property
    def ordered(self) -> bool:
        """Whether the rows' order is graded (the query sorts them)."""
        return "ORDER" in tokens(self.correct)

    def expected(self) -> tuple[tuple[tuple, ...], ...]:
        """The correct query's rows on each graded database (grade.run, cached)."""
        return _expected(self.correct)

    # `arl audit env` reads a task's public and hidden test cases (their `args`, as a test
    # file prints them): here, the expected rows on the public database and on the hidden
    # ones, as `run` prints rows, so that an answer showing a hidden database's expected
    # rows is a leak it finds
    @property
    def public(self) -> tuple[Case, ...]:
        return (Case((Shown(grade.rows_text(self.expected()[0])),)),)

    @property
    def hidden(self) -> tuple[Case, ...]:
        return tuple(Case((Shown(grade.rows_text(rows)),)) for rows in self.expected())


class Shown(str):
    """Text whose repr is itself (how a test case's argument prints, for the audit)."""

    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True)
class Case:
    """The audit's view of a graded database: its expected rows, as one argument."""

    args: tuple[Shown, ...]


@cache
def _expected(sql: str) -> tuple[tuple[tuple, ...], ...]:
    results = [grade.run(sql, db) for db in HIDDEN]
    bad = [r.message for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"a correct query fails: {sql!r}: {bad[0]}")
    return tuple(r.rows or () for r in results)


def _names(n: int) -> list[str]:
    """n distinct neutral names, drawn in a fixed order unrelated to the families."""
    pairs = [f"{a}_{b}" for b in NOUNS for a in ADJECTIVES]
    return random.Random("sqlfix-names").sample(pairs, n)


@cache
def all_tasks() -> tuple[SQLTask, ...]:
    """Every task, train first, in a fixed order; each one's bug shows on the public database
    (the buggy query returns other rows there than the correct one)."""
    made = []
    for family, split, about, template, params in TEMPLATES:
        for p in params:
            correct = " ".join(tokens(template.format(p)))
            buggy = " ".join(inject_bug(family, tokens(correct)))
            made.append((family, split, correct, buggy, about))
    names = _names(len(made))
    tasks = [SQLTask(n, *m) for n, m in zip(names, made, strict=True)]
    for t in tasks:
        want = t.expected()[0]
        got = grade.run(t.buggy, PUBLIC)
        if got.ok and grade.same_rows(got.rows or (), want, t.ordered):
            raise RuntimeError(f"{t.name}: the bug does not show on the public database")
    tasks.sort(key=lambda t: SPLITS.index(t.split))
    return tuple(tasks)


def tasks_for(split: str) -> tuple[SQLTask, ...]:
    """The tasks of one split ('train': 24, 'heldout': 12)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")
    return tuple(t for t in all_tasks() if t.split == split)


def get_task(name: str) -> SQLTask:
    for t in all_tasks():
        if t.name == name:
            return t
    raise KeyError(name)
