"""Command-line flags derived from a frozen config dataclass: one implementation for every recipe.

Each field becomes `--field-name` (underscores to dashes): typed by its annotation (int, float,
str with the choices the config declares in CHOICES, bool as `--flag/--no-flag`), its help the
field's trailing `# comment` in the source, its default shown. A nested config's fields are
dotted keys (`env.reward`). `--set KEY=VALUE` (repeatable) sets the same keys; flags and pairs
fill one dict, the last on the line winning. Bounds are the config's own: `config_from` builds
the config by keyword and re-spells the field its validation names as the user wrote it.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import io
import textwrap
import tokenize
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass, replace
from functools import cache
from typing import Any

from arl.errors import ArlError

KINDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
METAVARS = {"int": "INT", "float": "FLOAT", "str": "TEXT"}
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
VALUES = "config_values"  # the Namespace attribute flags and --set fill: key -> (value, spelling)
Unknown = Callable[[str], ArlError]  # an unknown key -> the error that names it


@dataclass(frozen=True)
class Key:
    """One settable key of a config, as its flag and `--set` see it."""

    name: str  # the field's name, dotted for a nested config's field ("lr", "env.reward")
    kind: str  # int, float, bool or str
    default: Any  # the dataclass's default
    help: str = ""  # the field's comment in the source
    choices: tuple[str, ...] = ()  # the allowed strings, where the config declares them

    @property
    def flag(self) -> str:
        """The option string: `--batch-size` for batch_size."""
        return "--" + self.name.replace("_", "-")


# --- the help: each field's comment in the class's source ---------------------------------------


def _comments_of(cls: type) -> dict[str, str]:
    """Field -> the comment on its line in `cls`'s own body, or the comment lines just above it
    (a `# ---` section header excluded); "" without one, {} without a source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = {
        t.start[0]: t.string.lstrip("#").strip() for t in tokens if t.type == tokenize.COMMENT
    }
    lines = source.splitlines()
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    out = {}
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        own = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
        above, n = [], node.lineno - 1
        while n in comments and lines[n - 1].lstrip().startswith("#"):
            if comments[n].startswith("---"):
                break
            above.insert(0, comments[n])
            n -= 1
        out[node.target.id] = own[0] if own else " ".join(above)
    return out


@cache
def field_comments(cls: type) -> dict[str, str]:
    """Field -> its help: the comment in the class that declares it; a subclass that redeclares
    a field without a comment keeps its base's."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if is_dataclass(klass):
            out |= {k: v for k, v in _comments_of(klass).items() if v or k not in out}
    return out


# --- the keys: kinds, defaults, choices, nesting ------------------------------------------------


def _default(f: Field) -> Any:
    """A field's default value (its factory's product)."""
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None  # type: ignore[misc]


def _kind(cls: type, f: Field) -> str:
    """int, float, bool or str: the field's annotation; anything else is refused."""
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if kind not in KINDS:
        raise TypeError(
            f"{cls.__name__}.{f.name}: a {kind} field has no flag (int, float, bool, str)"
        )
    return kind


def _key(cls: type, f: Field, prefix: str = "", defaults: Any = None) -> Key:
    """One scalar field of a config class as a key (`defaults`: an instance whose value wins)."""
    default = getattr(defaults, f.name) if hasattr(defaults, f.name) else _default(f)
    choices = tuple(getattr(cls, "CHOICES", {}).get(f.name, ()))
    help = field_comments(cls).get(f.name, "")
    return Key(prefix + f.name, _kind(cls, f), default, help, choices)


def config_keys(cls: type, nested: Mapping[str, Sequence[type]] | None = None) -> dict[str, Key]:
    """Every settable key of `cls`, in field order: its scalar fields, and a nested config's as
    `FIELD.name` (`nested`: the classes a field may hold, when not only its default's; a name
    two of them share is the first's)."""
    nested = dict(nested or {})
    out: dict[str, Key] = {}
    for f in fields(cls):
        default = _default(f)
        if f.name not in nested and not is_dataclass(default):
            out[f.name] = _key(cls, f)
            continue
        for klass in nested.get(f.name, (type(default),)):
            own = default if type(default) is klass else None
            for g in fields(klass):
                out.setdefault(f"{f.name}.{g.name}", _key(klass, g, f"{f.name}.", own))
    return out


Keys = Mapping[str, Key] | Callable[[], Mapping[str, Key]]  # or a function that makes them


def unknown_field(cls: type, keys: Mapping[str, Key]) -> Unknown:
    """The generic error for a key `cls` lacks, with the nearest key as a hint."""

    def unknown(key: str) -> ArlError:
        near = difflib.get_close_matches(key, list(keys), 1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        return ArlError(f"{key}: unknown {cls.__name__} field{hint}")

    return unknown


# --- text -> values -----------------------------------------------------------------------------


def coerce(key: Key, text: str) -> Any:
    """A flag's or a `--set` value's text as the key's kind; one line naming the key if not."""
    text = text.strip()
    try:
        if key.kind == "bool":
            if text.lower() in TRUE + FALSE:
                return text.lower() in TRUE
            raise ValueError
        if key.kind == "int":
            return int(text)
        if key.kind == "float":
            return float(text)
    except ValueError:
        raise ArlError(f"{key.name}: expected {KINDS[key.kind]}, got {text!r}") from None
    return text


def parse_pair(pair: str, keys: Mapping[str, Key], unknown: Unknown) -> tuple[str, Any]:
    """`KEY=VALUE` -> (key, typed value); an unknown key or a bad value names the key."""
    key, sep, text = pair.partition("=")
    key = key.strip()
    if not sep:
        raise ArlError(f"--set {pair!r}: expected KEY=VALUE")
    if key not in keys:
        raise unknown(key)
    return key, coerce(keys[key], text)


def merge(base: Mapping[str, Any], flat: Mapping[str, Any]) -> dict[str, Any]:
    """`base` (a nested config as a dict of its fields) with `flat`'s keys set, a dotted one
    inside its config's dict (`env.reward` -> out["env"]["reward"])."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, value in flat.items():
        head, dot, rest = key.partition(".")
        if not dot:
            out[key] = value
            continue
        sub = out.setdefault(head, {})
        if not isinstance(sub, dict):
            raise ArlError(f"{head}: expected an object of its config's fields, got {sub!r}")
        sub[rest] = value
    return out


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """`cls(**values)` by keyword; a nested config's dict goes over that field's default, and
    its errors are named by the dotted key."""
    kwargs = dict(values)
    for f in fields(cls):
        if isinstance(kwargs.get(f.name), dict) and is_dataclass(default := _default(f)):
            try:
                kwargs[f.name] = replace(default, **kwargs[f.name])  # type: ignore[type-var]
            except ArlError as e:
                raise ArlError(f"{f.name}.{e}") from None
    return cls(**kwargs)


# --- argparse: the flags, --set, and the config they build --------------------------------------


def _resolve(keys: Keys) -> Mapping[str, Key]:
    """The keys, made now if given as a function (PG's: only when --set or --keys is used)."""
    return keys() if callable(keys) else keys


class _Store(argparse.Action):
    """Put one key's value in args.config_values with its spelling: a field's flag (`key`), or
    `--set KEY=VALUE` (`keys`, `unknown`); the last on the line wins."""

    def __init__(self, option_strings, dest, key=None, keys=None, unknown=None, **kw) -> None:
        kw["default"] = argparse.SUPPRESS  # args.config_values holds only what was given
        super().__init__(option_strings, VALUES, **kw)
        self.key, self.keys, self.unknown = key, keys, unknown

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        seen = getattr(namespace, VALUES, None)
        if seen is None:
            seen = {}
            setattr(namespace, VALUES, seen)
        if self.key is None:
            name, value = parse_pair(value, _resolve(self.keys), self.unknown)
            spelling = name
        else:
            name, spelling = self.key.name, option_string
            if self.key.kind == "bool":
                value = not option_string.startswith("--no-")
        seen.pop(name, None)
        seen[name] = (value, spelling)


def _argtype(key: Key) -> Callable[[str], Any]:
    """The argparse type of a key's flag: its kind's conversion, a bad text a usage error."""

    def parse(text: str) -> Any:
        try:
            return coerce(key, text)
        except ArlError:
            raise argparse.ArgumentTypeError(f"expected {KINDS[key.kind]}, got {text!r}") from None

    parse.__name__ = KINDS[key.kind]
    return parse


def _shown(value: Any) -> str:
    """A default as the command line spells it."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if value == "" else str(value)


def add_config_flags(
    parser: argparse.ArgumentParser, cls: type, aliases: Mapping[str, str] | None = None
) -> dict[str, Key]:
    """One flag per key of `cls`, in a group of its own, and `--set KEY=VALUE`, both filling
    args.config_values; `aliases`: an older spelling -> the key it sets. Returns the keys."""
    keys = config_keys(cls)
    group = parser.add_argument_group(
        f"{cls.__name__} fields",
        f"{cls.__module__}.{cls.__name__}: one flag per field, or "
        "--set KEY=VALUE with the field's name; checked by the config itself",
    )
    for key in keys.values():
        names = [key.flag, *(f"--{a}" for a, k in (aliases or {}).items() if k == key.name)]
        help = f"{key.help} (default: {_shown(key.default)})".replace("%", "%%").lstrip()
        if key.kind == "bool":
            names.append(f"--no-{key.flag[2:]}")
            group.add_argument(*names, action=_Store, key=key, nargs=0, help=help)
        else:
            group.add_argument(
                *names,
                action=_Store,
                key=key,
                help=help,
                type=None if key.kind == "str" else _argtype(key),
                choices=key.choices or None,
                metavar=None if key.choices else METAVARS[key.kind],
            )
    what = f"one {cls.__name__} field by its name, repeatable (the keys and checks of the flags)"
    add_set_flag(group, keys, unknown_field(cls, keys), what)
    return keys


def add_set_flag(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    keys: Keys,
    unknown: Unknown,
    help: str,
) -> None:
    """`--set KEY=VALUE` (repeatable), parsed as it is read: the key known, the value typed."""
    parser.add_argument(
        "--set",
        action=_Store,
        keys=keys,
        unknown=unknown,
        metavar="KEY=VALUE",
        help=help,
    )


def given_values(args: argparse.Namespace) -> dict[str, Any]:
    """The keys the flags and --set pairs gave, -> their values (dotted for a nested config)."""
    return {k: v for k, (v, _) in getattr(args, VALUES, {}).items()}


def config_from(
    args: argparse.Namespace, cls: type, check: Callable[[Any], None] | None = None
) -> Any:
    """The config of the parsed flags and --set pairs, by keyword over `cls`'s defaults, then
    `check`ed (a recipe's own use of a field); an error names the field as the user spelled it."""
    spelled = {k: s for k, (_, s) in getattr(args, VALUES, {}).items()}
    try:
        config = build(cls, merge({}, given_values(args)))
        if check is not None:
            check(config)
        return config
    except ArlError as e:
        name, sep, rest = str(e).partition(":")
        if sep and name in spelled:
            raise ArlError(f"{spelled[name]}:{rest}") from None
        raise


def describe_keys(keys: Mapping[str, Key]) -> str:
    """Every key on a line: name=default, kind or choices, help."""
    width = max(len(f"{k.name}={_shown(k.default)}") for k in keys.values())
    rows = []
    for k in keys.values():
        what = "|".join(k.choices) if k.choices else k.kind
        rows.append(f"{k.name}={_shown(k.default)}".ljust(width + 2) + f"{what}: {k.help}")
    return "\n".join(rows)


def add_keys_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """`--keys`: list every key with its default, kind and help, and exit. Read after the
    whole line is parsed (the command prints describe_keys of the keys it means), so a flag
    after it (`--keys --env codefix`) still counts and nothing else is required."""
    parser.add_argument("--keys", action="store_true", help=help)
