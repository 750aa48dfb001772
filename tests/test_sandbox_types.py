"""arl.sandbox without a sandbox: comparison, job checks, the runner's stream parser."""

import json
import os

import pytest

from arl.errors import ArlError
from arl.sandbox import (
    Case,
    Job,
    Limits,
    SandboxUnavailable,
    child,
    launch,
    make_sandbox,
    runner,
    sandbox_available,
)
from arl.sandbox.types import HARNESS_FILES, harness_flags, judge, same


def test_same_is_exact_in_type_and_tolerant_in_floats():
    assert same(0.1 + 0.2, 0.3) and same([1, [2.0, "a"]], [1, [2.0, "a"]])
    assert same({"a": [1]}, {"a": [1]}) and same(float("nan"), float("nan"))
    assert same([1, 2], (1, 2))  # JSON has no tuples: a tuple result arrives as a list
    assert not same(1, True) and not same(True, 1)  # bool is not int
    assert not same(2.0, 2) and not same(2, 2.0)
    assert not same(1.0, 1.0 + 1e-6) and not same([1, 2], [1, 2, 3])
    assert not same(None, 0) and not same("1", 1) and not same({"a": 1}, {"a": 1, "b": 2})


def test_judge_never_shows_the_expected_value():
    case = Case("t", (1,), "SECRET-EXPECTED")
    r = judge(case, {"s": "ok", "v": "guess"})
    assert (r.status, r.detail) == ("fail", 'got "guess"')
    assert judge(case, {"s": "ok", "v": "SECRET-EXPECTED"}).status == "pass"
    assert judge(case, {"s": "raise", "e": "MemoryError", "m": ""}).status == "memory"
    assert judge(case, {"s": "raise", "e": "KeyError", "m": "'k'"}).detail == "KeyError: 'k'"
    assert judge(case, {"s": "unser", "t": "A"}).detail.startswith("unserializable")
    with pytest.raises(ValueError):
        judge(case, {"s": "pass"})  # the runner never says pass: that is decided here


def test_jobs_and_cases_are_checked_when_made():
    with pytest.raises(ArlError, match="JSON"):
        Case("t", (object(),), 1)
    with pytest.raises(ArlError, match="JSON"):
        Case("t", (), {1: 2})
    with pytest.raises(ArlError, match="at least one case"):
        Job("x = 1", "f", ())
    for bad in ("../x.py", "/etc/passwd", "solution.py", "a/../../b", ""):
        with pytest.raises(ArlError, match="file name"):
            Job("x = 1", "f", (Case("t", (), 1),), files=((bad, "x"),))
    with pytest.raises(ArlError, match="positive"):
        Limits(wall_seconds=0)
    with pytest.raises(ArlError, match="output_bytes"):
        Limits(output_bytes=1 << 30)
    with pytest.raises(ArlError, match="unknown sandbox kind"):
        make_sandbox("docker")
    job = Job("x = 1", "f", [Case("t", [1], 1)], files=[("pkg/helper.py", "y = 2")])
    assert job.cases[0].args == (1,) and job.files == (("pkg/helper.py", "y = 2"),)


def test_harness_files_are_the_runners():
    assert set(runner.HARNESS) == set(HARNESS_FILES)
    names = ["conftest.py", "sub/sitecustomize.py", "x.pth", "helper.py"]
    flags = ("dropped:conftest.py", "dropped:sitecustomize.py", "dropped:x.pth")
    assert harness_flags(names) == flags


def test_plain_refuses_lookalikes():
    class Always:
        def __eq__(self, other):
            return True

    class Int(int):
        pass

    assert child.plain((1, [2.5, None], {"a": True})) == [1, [2.5, None], {"a": True}]
    deep = []
    for _ in range(150):
        deep = [deep]
    for bad in (Always(), Int(3), {1: 2}, {"a": {1}}, b"x", (x for x in ()), deep):
        with pytest.raises(child.Unserializable):
            child.plain(bad)


def test_stream_parser_accepts_only_the_protocol():
    def lines(*recs):
        return b"".join(json.dumps(r).encode() + b"\n" for r in recs)

    deep = []
    for _ in range(200):  # deeper than any value child.plain lets through
        deep = [deep]
    ok = lines({"k": "imported"}, {"k": "start", "i": 0}, {"k": "ok", "i": 0, "v": 5})
    assert child.parse_stream(ok, 2) == ([{"s": "ok", "v": 5}], True, None, None)
    cut = lines({"k": "imported"}, {"k": "start", "i": 0}) + b'{"k": "ok", "i'
    assert child.parse_stream(cut, 1) == ([], True, 0, None)  # died mid-case 0
    forged = [
        lines({"k": "start", "i": 0}),  # no import first
        lines({"k": "imported"}, {"k": "ok", "i": 0, "v": 5}),  # a result never started
        lines({"k": "imported"}, {"k": "start", "i": 1}),  # out of order
        lines({"k": "imported"}, {"k": "start", "i": 0}, {"k": "pass", "i": 0}),
        lines({"k": "imported"}) + b"passed 1 of 1\n",
        lines({"k": "imported"}, {"k": "start", "i": 0}, {"k": "ok", "i": 0, "v": deep}),
    ]
    for data in forged:
        assert child.parse_stream(data, 2)[3] == "bad result stream"
    err = lines({"k": "import_error", "e": "SyntaxError", "m": "bad"})
    assert child.parse_stream(err, 2)[0] == [{"s": "import", "e": "SyntaxError", "m": "bad"}] * 2


def test_missing_bwrap_is_one_line_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no bwrap on PATH
    reason = sandbox_available()
    assert reason == (
        "bubblewrap (bwrap) not found: install the Debian package bubblewrap (scripts/setup "
        "does), or pass --allow-unsandboxed to run policy code without a sandbox"
    )
    for kind in ("auto", "bwrap"):
        with pytest.raises(SandboxUnavailable) as err:
            make_sandbox(kind)
        assert str(err.value) == reason and "\n" not in str(err.value)
        assert isinstance(err.value, ArlError)


def test_bwrap_command_line_binds_no_host_data():
    argv = launch.bwrap_argv("/usr/bin/bwrap", 1234, ("python",))
    text = " ".join(argv)
    for flag in (
        "--unshare-net",
        "--unshare-pid",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--cap-drop ALL",
    ):
        assert flag in text
    binds = [argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    assert "--bind" not in argv  # nothing of the host is writable
    exe, roots = launch.interpreter()
    assert set(binds) <= {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", *roots}
    home = os.path.expanduser("~")
    assert home not in binds and os.getcwd() not in binds
    assert not any(os.path.dirname(launch.__file__).startswith(b) for b in binds if b != "/")
    if launch.filter_program() is not None:  # x86_64 and aarch64: the syscall filter
        assert argv[argv.index("--seccomp") + 1] == launch.SECCOMP_FD
