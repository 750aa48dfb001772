"""The docs cannot drift from the CLI: every `arl` command in README.md and docs/*.md parses.

A command is a line in a fenced code block whose info string is `bash`, `sh`, `shell`,
`console` or empty, that starts with `arl ` (after an optional `$ `), or the part of such a line
after `&&`, `||`, `;` or `|` that starts with `arl`. Lines ending in a backslash are joined with
the next; a `# comment` is dropped. Each command goes through the CLI's own parser
(`arl.cli.main.build_parser().parse_args`) without running: an unknown flag, a missing argument
or a bad choice exits, and the test fails naming the file and the line. Placeholders (CKPT, DIR,
OUT) are strings to argparse and parse.

Synopsis lines (`arl reproduce ch15 [--seeds N] ...`) are not commands: they go in ```text
blocks, which are not checked, nor are ```python or ```json ones.

The links are checked too: every docs/*.md page is linked from README.md, and every relative
link in README.md and docs/ points to a file that exists (and to a heading of it, after `#`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
SEPARATORS = {"&&", "||", ";", "|"}
REDIRECTS = {">", ">>", "<", ">&", "&>"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


def fenced_blocks(text: str):
    """(info string, [(line number, line)]) for every fenced code block."""
    block, info, fence = None, "", ""
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if block is None and m:
            block, info, fence = [], m.group(3).lower(), m.group(2)
        elif block is not None and line.strip().startswith(fence) and not line.strip(fence[0]):
            yield info, block
            block = None
        elif block is not None:
            block.append((n, line))


def logical_lines(lines):
    """Join backslash-continued lines; each keeps the number of its first line."""
    out, start, parts = [], None, []
    for n, line in lines:
        if start is None:
            start = n
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        out.append((start, " ".join(p.strip() for p in parts)))
        start, parts = None, []
    if parts:
        out.append((start, " ".join(p.strip() for p in parts)))
    return out


def split_commands(line: str) -> list[list[str]]:
    """A shell line's simple commands, as argv lists (comments and redirections dropped)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    commands, argv, skip = [], [], False
    for token in lex:
        if skip:
            skip = False
        elif token in SEPARATORS:
            commands.append(argv)
            argv = []
        elif token in REDIRECTS:
            skip = True
        else:
            argv.append(token)
    commands.append(argv)
    return [c for c in commands if c]


def commands_in(text: str, name: str) -> list[tuple[str, list[str]]]:
    """('NAME:LINE', argv) for every `arl` command in one page's shell blocks."""
    found = []
    for info, lines in fenced_blocks(text):
        if info not in SHELL_BLOCKS:
            continue
        for n, line in logical_lines(lines):
            line = line.strip()
            line = line[2:] if line.startswith("$ ") else line
            if not re.search(r"(^|&&|\|\||;|\|)\s*arl\s", line + " "):
                continue
            for argv in split_commands(line):
                if argv[0] == "arl":
                    found.append((f"{name}:{n}", argv))
    return found


COMMANDS = [c for p in PAGES for c in commands_in(p.read_text(), str(p.relative_to(ROOT)))]


def parse_error(argv: list[str], capsys) -> str | None:
    """None when the CLI's parser accepts argv (not run); else its message."""
    from arl.cli.main import build_parser
    from arl.errors import ArlError

    try:
        build_parser().parse_args(argv)
    except ArlError as e:  # a value the parser checks itself (arl reports it as a usage error)
        return str(e)
    except SystemExit as e:
        err = capsys.readouterr().err.strip()
        if e.code not in (0, None):  # 0: --help or --version, which print and stop
            return err or f"exit status {e.code}"
    return None


@pytest.mark.parametrize("where, argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_documented_command_parses(where, argv, capsys):
    error = parse_error(argv[1:], capsys)
    assert error is None, f"{where}: `{shlex.join(argv)}` does not parse: {error}"


def test_the_commands_are_found():
    """The extractor finds the README's two commands and commands on every page with a shell
    block (a broken extractor would pass every check above by finding nothing)."""
    readme = [shlex.join(argv) for where, argv in COMMANDS if where.startswith("README.md:")]
    assert "arl reproduce ch15" in readme
    assert "bash scripts/setup && arl reproduce ch15" in (ROOT / "README.md").read_text()
    assert "bash scripts/test" in (ROOT / "README.md").read_text()
    assert len(COMMANDS) >= 40, len(COMMANDS)


def test_the_checker_catches_a_wrong_flag(capsys):
    page = (
        "```bash\n$ arl eval oracle --split heldout \\\n    --samples 2 --no-such-flag\n"
        "bash scripts/setup && arl reproduce ch15 --seeds 2 | tee log  # a comment\n```\n"
        "```text\narl reproduce ch15 [--seeds N]\n```\n"
        "```python\narl = 1\n```\n"
    )
    found = commands_in(page, "page.md")
    assert found == [
        (
            "page.md:2",
            ["arl", "eval", "oracle", "--split", "heldout", "--samples", "2", "--no-such-flag"],
        ),
        ("page.md:4", ["arl", "reproduce", "ch15", "--seeds", "2"]),
    ]
    assert "unrecognized arguments: --no-such-flag" in parse_error(found[0][1][1:], capsys)
    assert parse_error(found[1][1][1:], capsys) is None
    assert "invalid choice" in parse_error(["reproduce", "ch16"], capsys)


# --- links ---

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def outside_fences(text: str) -> str:
    """The page without its fenced blocks."""
    keep, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            keep.append(line)
    return "\n".join(keep)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, each
    space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    heads = re.findall(r"^#{1,6}\s+(.+?)\s*#*$", outside_fences(path.read_text()), re.M)
    return {slug(h) for h in heads}


def relative_links(path: Path) -> list[str]:
    """Link targets outside code (a link in a code span or block is not a link)."""
    prose = re.sub(r"`[^`]*`", "", outside_fences(path.read_text()))
    links = LINK.findall(prose)
    return [t for t in links if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]


def test_every_docs_page_is_linked_from_the_readme():
    assert DOCS, "docs/ has no pages"
    linked = {
        (ROOT / t.split("#")[0]).resolve()
        for t in relative_links(ROOT / "README.md")
        if t[0] != "#"
    }
    missing = [str(p.relative_to(ROOT)) for p in DOCS if p.resolve() not in linked]
    assert not missing, f"docs pages not linked from README.md: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_points_to_a_file_that_exists(page):
    broken = []
    for target in relative_links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"
