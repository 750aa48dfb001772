"""SQLFix's databases: one schema, the public database every episode shows, and the hidden
variants that grade a query (drawn from a fixed seed, so every process builds the same ones).

Nothing here imports arl: the data and the grader (sqlfix.grade) are the environment's own,
plain Python and sqlite3.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SCHEMA = (
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT, age INTEGER, "
    "email TEXT)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, product TEXT, "
    "amount INTEGER, status TEXT)",
)
TABLES = {  # table -> its columns, in order (what `schema` shows)
    "customers": ("id", "name", "city", "age", "email"),
    "orders": ("id", "customer_id", "product", "amount", "status"),
}
NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
    "ivan", "judy", "mallory", "nia", "oscar", "peggy", "quinn", "rupert",
)  # fmt: skip
CITIES = ("paris", "lyon", "oslo", "rome", "kyiv")
PRODUCTS = ("lamp", "desk", "chair", "pen", "book", "mug")
STATUSES = ("paid", "shipped", "refunded")


@dataclass(frozen=True)
class Database:
    """One database's rows: customers (id, name, city, age, email) and orders (id,
    customer_id, product, amount, status); None is SQL's NULL."""

    name: str
    customers: tuple[tuple, ...]
    orders: tuple[tuple, ...]

    def script(self) -> str:
        """The SQL that builds it (schema, then every row)."""
        lines = [s + ";" for s in SCHEMA]
        for table, rows in (("customers", self.customers), ("orders", self.orders)):
            for row in rows:
                lines.append(f"INSERT INTO {table} VALUES ({', '.join(map(_literal, row))});")
        return "\n".join(lines)


def _literal(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(int(v))  # type: ignore[call-overload]


def _email(name: str) -> str:
    return f"{name}@mail"


# the public database: what `run` answers from, chosen by hand so that each task's bug shows
PUBLIC = Database(
    "public",
    customers=(
        (1, "alice", "paris", 34, "alice@mail"),
        (2, "bob", "lyon", 27, None),
        (3, "carol", "paris", 41, "carol@mail"),
        (4, "dave", "oslo", 30, None),
        (5, "erin", "rome", 52, "erin@mail"),
        (6, "frank", "lyon", 30, "frank@mail"),
        (7, "grace", "kyiv", 23, None),
        (8, "heidi", "paris", 45, "heidi@mail"),
        (9, "ivan", "oslo", 38, "ivan@mail"),
        (10, "judy", "rome", 27, None),
    ),
    orders=(
        (1, 3, "lamp", 40, "paid"),
        (2, 1, "desk", 60, "shipped"),
        (3, 5, "pen", 5, "paid"),
        (4, 3, "chair", 75, None),
        (5, 8, "book", 20, "paid"),
        (6, 2, "mug", 12, "refunded"),
        (7, 9, "lamp", 40, "shipped"),
        (8, 1, "pen", 8, "paid"),
        (9, 6, "desk", 60, None),
        (10, 4, "book", 20, "paid"),
        (11, 10, "chair", 90, "paid"),
        (12, 7, "mug", 12, "shipped"),
        (13, 3, "book", 25, "paid"),
        (14, 9, "pen", 5, None),
    ),
)


def variant(seed: int) -> Database:
    """A hidden database: the same schema and value sets, other rows (seeded)."""
    rng = random.Random(f"sqlfix-hidden-{seed}")
    names = rng.sample(NAMES, 11)
    customers = tuple(
        (
            i + 1,
            name,
            rng.choice(CITIES),
            rng.choice((23, 27, 30, 34, 38, 41, 45, 52, rng.randint(18, 70))),
            None if rng.random() < 0.3 else _email(name),
        )
        for i, name in enumerate(names)
    )
    orders = tuple(
        (
            i + 1,
            rng.randint(1, len(customers) + 1),  # now and then a customer who does not exist
            rng.choice(PRODUCTS),
            rng.choice((5, 8, 12, 20, 25, 40, 60, 75, 90, rng.randint(1, 99))),
            None if rng.random() < 0.25 else rng.choice(STATUSES),
        )
        for i in range(16)
    )
    return Database(f"hidden-{seed}", customers, orders)


HIDDEN = (PUBLIC, variant(1), variant(2))  # a submission is graded on all three
