"""Every bad input to `arl` is exit status 2 and one line on stderr; runs survive a SIGKILL.

A hypothesis fuzz over every subcommand's numeric flags, PGConfig fields and input files
(in-process, parse and validation only: no training starts), the probes of issue 10 one by
one, and a `train pg` killed mid-run and resumed to the same final weights.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arl.bugfix import default_vocab
from arl.cli.main import build_parser, main
from arl.model import TinyAgent, TinyAgentConfig
from arl.train.checkpoint import save_checkpoint
from arl.train.pg_config import PGConfig

ROOT = Path(__file__).resolve().parents[1]
BAD_NUMBERS = ["nan", "inf", "-inf", "1e400", "abc", "", "0x10", "1_0e"]
# positionals that let a subcommand reach its flags (files are made per example)
POSITIONALS = {
    ("eval",): ["oracle"],
    ("show",): ["mean"],
    ("stats", "passk"): ["{file}"],
    ("stats", "compare"): ["{file}", "{file}"],
    ("reproduce", "problem"): ["3"],
}


def _numeric_flags() -> list[tuple[tuple[str, ...], str]]:
    """(subcommand path, flag) for every flag of every subcommand that takes a number."""
    found = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            elif action.option_strings and action.type not in (None, str, Path):
                found.append((path, action.option_strings[0]))

    walk(build_parser(), ())
    return found


FLAGS = _numeric_flags()
FAST = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}
PG_NUMBERS = [f.name for f in fields(PGConfig) if f.type in ("int", "float")]


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _one_line(code: int, err: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("arl: error:") and "Traceback" not in err


def test_the_fuzz_covers_every_subcommand():
    commands = {path[0] for path, _ in FLAGS}
    assert commands >= {"eval", "show", "stats", "calc", "sim", "reproduce"}
    assert len(FLAGS) > 60


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(flag=st.sampled_from(FLAGS), bad=st.sampled_from(BAD_NUMBERS))
def test_fuzz_every_numeric_flag(capsys, flag, bad):
    path, option = flag
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "r.jsonl"
        f.write_text('{"task": "t", "sample": 0, "passed": true}\n')
        pos = [p.format(file=f) for p in POSITIONALS.get(path, [])]
        _one_line(*_run([*path, *pos, f"{option}={bad}"], capsys))


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.sampled_from(PG_NUMBERS),
    bad=st.sampled_from(["nan", "inf", "-inf", "1e400", "1e999", "-1e9", "9223372036854775808"]),
)
def test_fuzz_every_pg_number(capsys, key, bad):
    """NaN, inf, huge or far-negative values of any PGConfig number: refused, the field named."""
    with tempfile.TemporaryDirectory() as tmp:
        code, err = _run(["train", "pg", "--set", f"{key}={bad}", "--set", f"out={tmp}/r"], capsys)
        _one_line(code, err)
        assert key in err and not Path(tmp, "r").exists()  # refused before the folder


def _bad_files():
    garbage = st.binary(min_size=1, max_size=200).map(lambda b: b"\xff\xfe" + b)
    nested = st.integers(1_000, 60_000).map(lambda n: ("[" * n + "]" * n).encode())
    wrong = st.sampled_from(
        [
            b"[]",
            b"42",
            b'"x"',
            b"null",
            b'{"steps": NaN}',
            b'{"seed": -1}',
            b'{"steps": 1e400}',
            b'{"seed": 9223372036854775808}',
            b'{"lr": Infinity}',
            b'{"bogus": 1}',
        ]
    )
    return st.one_of(garbage, nested, wrong)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=_bad_files(), command=st.sampled_from(["pg", "fleet", "passk", "compare", "eval"]))
def test_fuzz_input_files(capsys, data, command):
    """Config files, result files and checkpoint metadata that are not what they should be."""
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "input"
        f.write_bytes(data)
        argv = {
            "pg": ["train", "pg", "--config", str(f), "--set", f"out={tmp}/run"],
            "fleet": ["sim", "fleet", "--config", str(f), "--out", f"{tmp}/sim"],
            "passk": ["stats", "passk", str(f)],
            "compare": ["stats", "compare", str(f), str(f)],
            "eval": ["eval", tmp],
        }[command]
        if command == "eval":
            (Path(tmp) / "config.json").write_bytes(data)
            (Path(tmp) / "model.safetensors").write_bytes(data)
        _one_line(*_run(argv, capsys))


@pytest.fixture()
def small_init(tmp_path):
    torch.manual_seed(0)
    config = TinyAgentConfig(
        vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2, block_size=256
    )
    return str(save_checkpoint(TinyAgent(config), tmp_path / "init"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["calc", "kl", "--log-ratios", "1000"], "<= 700"),
        (["calc", "kl", "--log-ratios", "-1000"], None),  # runs, with a warning line (issue 46)
        (["eval", "oracle", "--temperature", "inf"], "--temperature"),
        (["eval", "oracle", "--seed", str(2**63)], "a seed in"),
        (["calc", "group-size", "--budget", "1000000000"], "<= 100,000"),
        (["eval", "oracle", "--samples", "1000000000"], "<= 1,000"),
        (["reproduce", "problem", "5"], "available: 1, 2, 3"),
        (["eval", "./nowhere"], "no such checkpoint directory"),
        (["eval", "weak2"], "unknown policy"),
    ],
)
def test_issue_10_probes(capsys, argv, message):
    code, err = _run(argv, capsys)
    if message is None:
        assert code == 0, err
    else:
        _one_line(code, err)
        assert message in err


def test_unwritable_out_is_refused_before_the_evaluation(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    code, err = _run(["eval", "untrained", "--out", str(tmp_path / "file" / "r.jsonl")], capsys)
    _one_line(code, err)
    assert "cannot write" in err


def test_eval_of_a_run_folder_names_its_newest_checkpoint(capsys, tmp_path, small_init):
    save_checkpoint(
        TinyAgent(TinyAgentConfig(vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2)),
        tmp_path / "run" / "ckpt-000004",
    )
    code, err = _run(["eval", str(tmp_path / "run")], capsys)
    _one_line(code, err)
    assert "run folder; its newest checkpoint is" in err and "ckpt-000004" in err


def test_init_of_another_vocabulary_is_refused(capsys, tmp_path):
    model = TinyAgent(TinyAgentConfig(vocab_size=50, n_layer=1, n_embd=32, n_head=2))
    path = save_checkpoint(model, tmp_path / "other")
    code, err = _run(["train", "pg", "--init", str(path), "--set", f"out={tmp_path}/r"], capsys)
    _one_line(code, err)
    assert "vocabulary size 50" in err


def test_bad_threads_and_a_closed_pipe(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ARL_THREADS", "abc")
    code, err = _run(["train", "pg", "--set", f"out={tmp_path}/r"], capsys)
    _one_line(code, err)
    assert "ARL_THREADS" in err

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["calc", "list", "--json"]) == 141
    assert capsys.readouterr().err == ""  # quiet


def test_version_and_problem_help(capsys):
    from arl import __version__
    from arl.cli.reproduce import PROBLEM_NUMBERS
    from arl.experiments.problems import PROBLEMS

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"arl {__version__}"
    assert PROBLEM_NUMBERS == tuple(PROBLEMS)
    with pytest.raises(SystemExit):
        main(["reproduce", "problem", "--help"])
    listed = ", ".join(str(n) for n in PROBLEMS)  # every reproduced problem, in order
    assert listed in " ".join(capsys.readouterr().out.split())


def test_a_diverged_cli_run_exits_3_with_one_line(capsys, monkeypatch, tmp_path, small_init):
    from arl.train import pg

    real = pg.accumulate_policy_gradient

    def inf_loss(*args, **kwargs):
        return {**real(*args, **kwargs), "loss": float("inf")}

    monkeypatch.setattr(pg, "accumulate_policy_gradient", inf_loss)
    argv = [
        "train",
        "pg",
        "--init",
        small_init,
        "--quiet",
        "--set",
        "tasks_per_step=2",
        "--set",
        "group_size=2",
        "--set",
        f"out={tmp_path}/r",
    ]
    code, err = _run(argv, capsys)
    assert code == 3 and err.count("\n") == 1 and "step 1: loss inf" in err


# --- kill and resume ---------------------------------------------------------------------------

PG_ARGS = [
    "--quiet",
    "--set",
    "steps=6",
    "--set",
    "save_every=1",
    "--set",
    "tasks_per_step=2",
    "--set",
    "group_size=2",
    "--set",
    "minibatches=1",
    "--set",
    "eval_every=4",
    "--set",
    "eval_samples=1",
]


def _arl(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "ARL_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "arl", "train", "pg", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _rows(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.slow
def test_a_run_killed_mid_way_resumes_to_the_same_weights(tmp_path, small_init):
    from safetensors.torch import load_file

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    ref = _arl("--init", small_init, *PG_ARGS, "--set", f"out={whole}")
    run = _arl("--init", small_init, *PG_ARGS, "--set", f"out={killed}")
    deadline = time.monotonic() + 120
    while not (killed / "ckpt-000003").exists() and run.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert ref.wait() == 0, ref.stderr.read()
    assert not (killed / "ckpt-000006").exists()  # it really died before the end
    again = _arl("--init", small_init, *PG_ARGS, "--set", f"out={killed}", "--set", "resume=true")
    assert again.wait() == 0, again.stderr.read()
    a = load_file(str(whole / "ckpt-000006" / "model.safetensors"))
    b = load_file(str(killed / "ckpt-000006" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _rows(whole) == _rows(killed)  # no duplicate, missing or extra row
    assert not list(killed.glob(".tmp-*"))


@pytest.mark.parametrize("name", ["weak", "cold"])
def test_eval_accepts_the_cached_bases_like_train_pg_init(capsys, monkeypatch, name):
    from arl.train import bases

    calls = []

    def tiny(config, environment="bugfix"):
        calls.append(config.seed)
        torch.manual_seed(0)
        return TinyAgent(
            TinyAgentConfig(vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2)
        )

    monkeypatch.setattr(bases, "weak_base" if name == "weak" else "cold_start", tiny)
    code = main(["eval", name, "--samples", "1", "--seed", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and calls == [3] and out["policy"] == name and out["split"] == "train"


def test_eval_says_which_split_it_evaluates(capsys):
    assert main(["eval", "oracle", "--samples", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        "evaluating on the train split of bugfix (the tasks training sees; --split heldout" in out
    )


# --- issue 46: nothing hangs, nothing read whole, no internal error -----------------------------

DOCTOR_RUN = ROOT / "tests" / "fixtures" / "doctor" / "arl_pg"


class _Hung(BaseException):  # past a template's `except Exception`
    pass


@pytest.fixture()
def within():
    """`with within(s):` fails the test after s seconds instead of waiting for ever."""
    from contextlib import contextmanager

    @contextmanager
    def bound(seconds: float):
        def expire(_signum, _frame):
            raise _Hung(f"still running after {seconds} s")

        old = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    return bound


@pytest.mark.parametrize("command", ["doctor", "report"])
@pytest.mark.parametrize("name", ["metrics.jsonl", "config.json", "other.jsonl"])
def test_a_fifo_in_a_run_folder_is_refused_not_waited_on(capsys, tmp_path, within, command, name):
    run = tmp_path / "run"
    run.mkdir()
    if name != "metrics.jsonl":
        (run / "metrics.jsonl").write_bytes((DOCTOR_RUN / "metrics.jsonl").read_bytes())
    if name == "other.jsonl":
        os.remove(run / "metrics.jsonl")
    os.mkfifo(run / name)
    with within(30):
        code, err = _run([command, str(run)], capsys)
    _one_line(code, err)
    assert "FIFO" in err and name in err


@pytest.mark.parametrize(
    "argv",
    [
        ["doctor", "/dev/zero"],
        ["doctor", "/dev/urandom"],
        ["report", "/dev/zero", "--out", "{tmp}/r.html"],
        ["stats", "passk", "/dev/zero"],
        ["stats", "compare", "/dev/urandom", "/dev/zero"],
    ],
)
def test_devices_are_refused_not_read_whole(capsys, tmp_path, within, argv):
    with within(30):
        code, err = _run([a.format(tmp=tmp_path) for a in argv], capsys)
    _one_line(code, err)
    assert "a device, not a regular file" in err


def test_a_pipe_named_on_the_command_line_is_read(capsys, tmp_path, within):
    """`arl doctor <(cat metrics.jsonl)`: the pipe is read once, as the log it holds."""
    import threading

    data = (DOCTOR_RUN / "metrics.jsonl").read_bytes()
    r, w = os.pipe()

    def feed():
        with os.fdopen(w, "wb") as f:
            f.write(data)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        with within(60):
            code, err = _run(["doctor", f"/dev/fd/{r}"], capsys)
    finally:
        feeder.join()
        os.close(r)
    assert code == 0, err
    whole = _run(["doctor", str(DOCTOR_RUN / "metrics.jsonl")], capsys)
    assert whole[0] == 0


def test_files_are_bounded_and_read_line_by_line(capsys, tmp_path, monkeypatch):
    from arl import runio

    big = tmp_path / "results.json"
    big.write_text('{"a": "' + "x" * 5000 + '"}')
    monkeypatch.setattr(runio, "MAX_INPUT_BYTES", 1000)
    with pytest.raises(runio.ArlError, match="larger than 0 MiB"):
        runio.read_json(big)
    log = tmp_path / "m.jsonl"
    log.write_text('{"step": 1}\n{"step": 2}\n{"step": ')  # a torn last line: dropped
    monkeypatch.setattr(runio, "MAX_LINE_BYTES", 100)
    assert runio.read_jsonl(log) == [{"step": 1}, {"step": 2}]
    log.write_text('{"step": 1, "x": "' + "y" * 500 + '"}\n')
    with pytest.raises(runio.ArlError, match=":1: a line longer than"):
        runio.read_jsonl(log)


def test_stats_refuses_negative_sample_indices(capsys, tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text('{"task": "a", "sample": -1, "passed": true}\n')
    code, err = _run(["stats", "passk", str(f)], capsys)
    _one_line(code, err)
    assert "'sample' must be 0 or more" in err


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from arl.hf.templates import CHATML
    from arl.hf.tiny import build_tokenizer

    tok = build_tokenizer(vocab_size=300)
    tok.chat_template = CHATML
    folder = tmp_path_factory.mktemp("tok")
    tok.save_pretrained(folder)
    return folder


def _with_template(src: Path, dst: Path, template: str) -> Path:
    import shutil

    shutil.copytree(src, dst)
    for name in ("chat_template.jinja", "chat_template.json"):
        (dst / name).unlink(missing_ok=True)
    config = json.loads((dst / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    return dst


LOOPING = (
    "{% for a in range(99999) %}{% for b in range(99999) %}{% for m in messages %}"
    "{{ '' }}{% endfor %}{% endfor %}{% endfor %}"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "template, message",
    [
        (LOOPING, "rendering took more than"),
        ("{{ 'x' }}" * 200_000, "longer than 1,000,000 characters"),
        ("{% for m in range(99999) %}{{ 'y' * 50 }}{% endfor %}", "one rendering is longer"),
    ],
    ids=["looping", "huge", "long output"],
)
def test_check_template_renders_with_a_bound(
    capsys, tmp_path, monkeypatch, within, tokenizer_folder, template, message
):
    from arl.hf import template_check

    monkeypatch.setattr(template_check, "RENDER_SECONDS", 3.0)
    folder = _with_template(tokenizer_folder, tmp_path / "tok", template)
    with within(120):
        code, err = _run(["check", "template", str(folder)], capsys)
    _one_line(code, err)
    assert "chat template: not checked" in err and message in err


@pytest.mark.parametrize("case", ["list", "no tokenizer", "fifo"])
def test_check_template_refuses_what_is_no_tokenizer(capsys, tmp_path, within, case):
    pytest.importorskip("transformers")
    folder = tmp_path / "tok"
    folder.mkdir()
    if case == "list":
        (folder / "tokenizer_config.json").write_text("[1, 2]")
    elif case == "no tokenizer":
        (folder / "config.json").write_text('{"model_type": "gpt2"}')  # a model, no tokenizer
    else:
        os.mkfifo(folder / "tokenizer.json")
    with within(60):
        code, err = _run(["check", "template", str(folder)], capsys)
    _one_line(code, err)
    expected = {"list": "expected a JSON object", "no tokenizer": "no tokenizer here"}
    assert expected.get(case, "FIFO") in err


@pytest.mark.slow
@pytest.mark.parametrize(
    "address, message",
    [
        ("256.1.1.1:6379", "256.1.1.1 is not an IP address"),
        ("head:99999", "not a cluster address"),
        ("ray://-bad-:10001", "is not a host name"),
        ("127.0.0.1:1", "nothing answers there"),  # nothing listens on port 1
    ],
)
def test_an_unusable_ray_address_is_one_line(capsys, tmp_path, within, address, message):
    pytest.importorskip("ray")
    argv = ["reproduce", "problem", "1", "--quick", "--ray", address, "--out", str(tmp_path / "r")]
    with within(60):
        code, err = _run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert message in err


def test_a_silent_ray_address_is_refused_in_bounded_time(monkeypatch):
    """A head that never answers (a dropped SYN): refused after the bound, not retried."""
    import socket as socket_module
    import threading

    from arl import parallel
    from arl.errors import ArlError

    release = threading.Event()

    def silent(*_args, **_kwargs):
        release.wait(30)
        raise OSError("timed out")

    monkeypatch.setattr(socket_module, "create_connection", silent)
    start = time.monotonic()
    try:
        with pytest.raises(ArlError, match="no answer within 0.5 s"):
            parallel.check_ray_address("10.255.255.1:6379", seconds=0.5)
        assert time.monotonic() - start < 5
    finally:
        release.set()  # the probe's thread ends now, not in a later test


@pytest.mark.slow
def test_the_final_evaluation_of_a_recipe_says_where_it_is(capsys, tmp_path, monkeypatch):
    """`train sft --steps 0` evaluates both splits: minutes for an untrained CodeFix policy.
    It was slow, not hung, and silent; now a line comes every EVAL_EVERY_S seconds."""
    from arl.cli import recipes

    monkeypatch.setattr(recipes, "EVAL_EVERY_S", 0.0)
    monkeypatch.setattr("arl.rollout.REPORT_AFTER_S", 0.0)  # every batch reports, however short
    argv = ["train", "sft", "--init", "untrained", "--steps", "0", "--eval-samples", "1"]
    code = main([*argv, "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 0, err
    for split in ("train", "heldout"):
        assert f"sft evaluating {split} (" in err and "episodes done" in err
        assert "tokens sampled" in err


# --- issue 46: silent accepts -------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, names",
    [
        (
            ["train", "pg", "--env", "codefix", "--set", "env.name=bugfix"],
            ["--env codefix", "env.name=bugfix"],
        ),
        (
            ["train", "pg", "--env", "bugfix", "--set", "env.name=codefix"],
            ["--env bugfix", "env.name=codefix"],
        ),
        (
            ["train", "distill", "--teacher", "weak", "--set", "teacher=cold"],
            ["--teacher weak", "teacher=cold"],
        ),
    ],
)
def test_conflicting_settings_are_refused_naming_both(capsys, tmp_path, argv, names):
    code, err = _run([*argv, "--set", f"out={tmp_path}/r"], capsys)
    _one_line(code, err)
    assert all(n in err for n in names) and not (tmp_path / "r").exists()


def test_a_config_file_that_disagrees_with_env_is_refused(capsys, tmp_path):
    config = tmp_path / "c.json"
    config.write_text('{"env": {"name": "bugfix"}}')
    argv = [
        "train",
        "pg",
        "--env",
        "codefix",
        "--config",
        str(config),
        "--set",
        f"out={tmp_path}/r",
    ]
    code, err = _run(argv, capsys)
    _one_line(code, err)
    assert "--env codefix and env.name=bugfix" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "trajectories", "", "--policy", "oracle"],
        ["export", "pairs", "", "--policy", "oracle"],
        ["export", "hf", "", "{tmp}/hf"],
        ["export", "hf", "{tmp}/ckpt", ""],
        ["report", ""],
        ["report", "{tmp}", "--out", ""],
        ["doctor", ""],
        ["stats", "passk", ""],
        ["check", "template", ""],
    ],
)
def test_empty_paths_are_refused(capsys, tmp_path, argv):
    code, err = _run([a.format(tmp=tmp_path) for a in argv], capsys)
    _one_line(code, err)
    assert "empty path" in err
    assert not list(Path.cwd().glob("*.parquet"))


def test_kl_of_an_unrealistic_log_ratio_warns(capsys):
    code = main(["calc", "kl", "--log-ratios", "-1000", "0.1", "--json"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["table"][0]["log_ratio"] == -1000
    assert captured.err.count("\n") == 1 and captured.err.startswith("arl: warning: log-ratio")
    assert "outside any realistic range" in captured.err
    assert main(["calc", "kl", "--log-ratios", "-3", "0.1"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_distilling_from_an_untrained_teacher_warns(capsys, tmp_path, small_init):
    argv = ["train", "distill", "--teacher", "untrained", "--init", small_init, "--quiet"]
    sets = ["steps=1", "tasks_per_step=2", "group_size=2", "eval_every=0", f"out={tmp_path}/r"]
    code, err = _run([*argv, *(x for s in sets for x in ("--set", s))], capsys)
    assert code == 0, err
    assert "arl: warning: --teacher untrained" in err


def test_a_teacher_weaker_than_its_student_warns_once(capsys):
    from arl.cli.train import weaker_teacher_warning

    seen = []
    update = weaker_teacher_warning(seen.append)
    update({"step": 1, "pass_rate": 0.25, "teacher_pass_rate": 0.5})
    assert capsys.readouterr().err == ""
    update({"step": 2, "pass_rate": 0.5, "teacher_pass_rate": 0.25})
    update({"step": 3, "pass_rate": 0.75, "teacher_pass_rate": 0.0})
    err = capsys.readouterr().err
    assert len(seen) == 3 and err.count("\n") == 1
    assert "step 2: the teacher passes 0.25 of the step's tasks, the student 0.50" in err


# --- issue 46: a distillation's resume checks its teacher's weights -----------------------------


@pytest.mark.slow
def test_a_changed_teacher_is_refused_on_resume(capsys, tmp_path, small_init):
    config = TinyAgentConfig(
        vocab_size=len(default_vocab()), n_layer=1, n_embd=32, n_head=2, block_size=256
    )
    torch.manual_seed(1)
    teacher = str(save_checkpoint(TinyAgent(config), tmp_path / "teacher"))
    sets = ["tasks_per_step=2", "group_size=2", "eval_every=0", "save_every=1", f"out={tmp_path}/r"]
    argv = ["train", "distill", "--teacher", teacher, "--init", small_init, "--quiet"]
    argv += [x for s in sets for x in ("--set", s)]
    code, err = _run([*argv, "--set", "steps=1"], capsys)
    assert code == 0, err
    more = ["--set", "resume=true", "--allow-change", "steps"]
    code, err = _run([*argv, "--set", "steps=2", *more], capsys)
    assert code == 0, err  # the same teacher: resumed
    from arl.train.checkpoint import load_checkpoint, weights_sha256

    before = weights_sha256(load_checkpoint(teacher))
    torch.manual_seed(2)
    save_checkpoint(TinyAgent(config), teacher)  # other weights, in the same folder
    after = weights_sha256(load_checkpoint(teacher))
    code, err = _run([*argv, "--set", "steps=3", *more], capsys)
    _one_line(code, err)
    assert "is not the one" in err and before[:16] in err and after[:16] in err
    assert not (tmp_path / "r" / "ckpt-000003").exists()


# --- issue 46: smaller silent results -----------------------------------------------------------


def _all_output(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["reproduce", "ch15", "--quick", "--out", "{foreign}"],
        ["reproduce", "ch15", "--quick", "--ray", "127.0.0.1:1", "--out", "{tmp}/c"],
        ["reproduce", "problem", "1", "--quick", "--ray", "127.0.0.1:1", "--out", "{tmp}/p"],
    ],
)
def test_a_refusal_comes_alone_without_a_progress_line(capsys, tmp_path, argv):
    pytest.importorskip("ray")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("x")
    code, out, err = _all_output([a.format(tmp=tmp_path, foreign=foreign) for a in argv], capsys)
    assert out == ""
    _one_line(code, err)


@pytest.mark.slow
def test_a_refused_resume_prints_no_header(capsys, tmp_path, small_init):
    sets = ["steps=1", "tasks_per_step=2", "group_size=2", "eval_every=0", f"out={tmp_path}/r"]
    argv = ["train", "pg", "--init", small_init, "--quiet"]
    argv += [x for s in sets for x in ("--set", s)]
    code, out, err = _all_output(argv, capsys)
    assert code == 0, err
    code, out, err = _all_output([*argv, "--set", "resume=true", "--set", "lr=0.5"], capsys)
    assert out == ""
    _one_line(code, err)
    assert "the config differs" in err


@pytest.mark.slow
def test_export_hf_on_a_full_disk_leaves_no_folder(capsys, tmp_path, small_init, monkeypatch):
    pytest.importorskip("transformers")
    from arl import export

    real, calls = export.atomic_write_bytes, []

    def full_disk(path, data):
        calls.append(path)
        if len(calls) > 1:  # the first file fits, the second does not
            raise export.ArlError(f"cannot write {path}: No space left on device")
        return real(path, data)

    monkeypatch.setattr(export, "atomic_write_bytes", full_disk)
    argv = ["export", "hf", "--env", "bugfix", small_init]
    code, err = _run([*argv, str(tmp_path / "new" / "hf")], capsys)
    _one_line(code, err)
    assert "No space left on device" in err
    assert len(calls) == 2 and not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()  # a folder that was there before stays, empty
    calls.clear()
    code, err = _run([*argv, str(tmp_path / "kept")], capsys)
    assert code == 2 and (tmp_path / "kept").is_dir()


# --- issue 46: a second Ctrl-C ------------------------------------------------------------------

SLOW_EXIT = """
import multiprocessing, sys, time
from pathlib import Path

from arl.train import pg_groups

real_close = pg_groups.Rollouts.close


def slow_close(self):  # a cleanup that takes a while: joining rollout workers, say
    time.sleep(5)
    real_close(self)


pg_groups.Rollouts.close = slow_close
worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(600,))
worker.start()  # a worker of the run's, which must not outlive it
Path(sys.argv[1]).write_text(str(worker.pid))
from arl.cli.main import main

sys.argv = ["arl", *sys.argv[2:]]
sys.exit(main())
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
def test_a_second_ctrl_c_ends_in_one_line_and_status_130(tmp_path, small_init, presses):
    out, pidfile = tmp_path / "r", tmp_path / "worker.pid"
    sets = ["steps=1000", "tasks_per_step=2", "group_size=2", "eval_every=0", f"out={out}"]
    argv = [
        "train",
        "pg",
        "--init",
        small_init,
        "--quiet",
        *(x for s in sets for x in ("--set", s)),
    ]
    env = {**os.environ, "ARL_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [sys.executable, "-c", SLOW_EXIT, str(pidfile), *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()
            time.sleep(0.05)
        run.send_signal(signal.SIGINT)  # the first: the run stops, its cleanup begins (5 s)
        time.sleep(1.0)
        if presses == 2:
            run.send_signal(signal.SIGINT)  # the second, during that cleanup
        _, err = run.communicate(timeout=60)
        deadline = time.monotonic() + 10
        worker = int(pidfile.read_text())
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        alive = _alive(worker)
    finally:
        if run.poll() is None:
            run.kill()
        if pidfile.exists() and _alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the test leaves none either
    assert run.returncode == 130, err
    assert err == "arl: interrupted\n", err
    assert not alive, "a worker outlived the run"
