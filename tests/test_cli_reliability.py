"""Nothing silently wrong, round two (issue 26): outputs that never clobber what they point to,
write errors and closed pipes without an internal error, read-backs that name what is missing."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from arl.cli.main import main

ROOT = os.geteuid() == 0


def _arl(*argv: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "arl", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(not ROOT, reason="mknod needs root")
def test_out_writes_through_a_device_and_never_replaces_it(tmp_path, capsys):
    dev = tmp_path / "nulldev"
    os.mknod(dev, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    assert main(["eval", "oracle", "--samples", "1", "--out", str(dev)]) == 0
    assert stat.S_ISCHR(dev.stat().st_mode)  # still the device


def test_out_follows_a_symlink_and_keeps_it(tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert main(["eval", "oracle", "--samples", "1", "--out", str(link), "--overwrite"]) == 0
    assert link.is_symlink() and json.loads(target.read_text().splitlines()[0])["passed"]


def test_out_refuses_an_existing_result_an_empty_path_and_follows_the_umask(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    old = os.umask(0o027)
    try:
        assert main(["eval", "oracle", "--samples", "1", "--out", str(out)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    capsys.readouterr()
    assert main(["eval", "oracle", "--samples", "1", "--out", str(out)]) == 2
    assert "exists (an earlier result)" in capsys.readouterr().err
    assert main(["eval", "oracle", "--samples", "1", "--out", ""]) == 2
    assert "empty path" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize(
    "argv", [["tokens"], ["calc", "list"], ["eval", "oracle", "--samples", "1", "--json"]]
)
def test_a_full_output_is_one_line_and_exit_1(argv):
    with open("/dev/full", "w") as full:
        r = _arl(*argv, stdout=full)
    assert r.returncode == 1 and "internal error" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "arl: error: cannot write the output (No space left on device)"
    ]


def test_a_closed_pipe_ends_quietly():
    p = subprocess.Popen(
        [sys.executable, "-m", "arl", "show", "sum_list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.read(5)
    p.stdout.close()
    assert p.wait(timeout=120) in (0, 141) and p.stderr.read() == b""


def test_a_problem_run_read_back_without_a_seeds_effect_is_refused(tmp_path, capsys):
    from arl.experiments import problems

    settings = problems._settings(2, True)
    record = {"seed": 0, "detail": "d", "seconds": 1.0}  # 'effect' deleted
    (tmp_path / "results.json").write_text(json.dumps({**settings, "per_seed": [record]}))
    argv = ["reproduce", "problem", "2", "--quick", "--seed", "0", "--seeds", "1"]
    code = main([*argv, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "seed 0's results lack effect" in err and "internal" not in err


def test_a_ch15_retable_without_curves_names_what_is_missing(tmp_path, capsys):
    payload = {"quick": True, "runs": [{"recipes": {"cost": {}}}]}
    (tmp_path / "results.json").write_text(json.dumps(payload))
    code = main(["reproduce", "ch15", "--retable", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "not a complete ch15 run (no " in err and "internal" not in err


def test_a_huge_integer_in_a_config_is_one_line(tmp_path, capsys):
    config = tmp_path / "fleet.json"
    config.write_text('{"seed": ' + "9" * 5001 + "}")
    code = main(["sim", "fleet", "--config", str(config), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "invalid JSON" in err and err.count("\n") == 1


def test_a_group_larger_than_the_budget_is_refused_not_zero_prompts(capsys):
    assert main(["calc", "degenerate-group", "--G", "1024", "--budget", "512"]) == 2
    assert "larger than --budget 512" in capsys.readouterr().err
    assert main(["calc", "degenerate-group", "--G", "512", "--budget", "512", "--json"]) == 0


def test_workers_start_and_run_deaf_to_ctrl_c():
    """A terminal's Ctrl-C reaches the whole process group. A worker never handles it: it starts
    with the signal blocked (a Ctrl-C during its start-up printed a traceback from its imports)
    and then ignores it; the parent alone turns it into one line and ends the workers."""
    import signal

    from arl.parallel import Where, run_many

    jobs = [(signal.SIGINT,), (signal.SIGINT,)]
    got = [r for _, r in run_many(signal.getsignal, jobs, Where(workers=2))]
    assert got == [signal.SIG_IGN, signal.SIG_IGN]
    masks = [
        r
        for _, r in run_many(signal.pthread_sigmask, [(signal.SIG_BLOCK, [])] * 2, Where(workers=2))
    ]
    assert all(signal.SIGINT in m for m in masks)
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # this one hears it


def test_a_refused_init_leaves_no_claimed_folder(tmp_path, capsys):
    (tmp_path / "good.jsonl").write_text("{}\n")
    for init in (str(tmp_path / "good.jsonl"), str(tmp_path)):
        out = tmp_path / f"O{len(init)}"
        assert main(["train", "pg", "--init", init, "--set", f"out={out}"]) == 2
        assert not out.exists()
    assert "is a file, not a checkpoint directory" in capsys.readouterr().err


def test_pg_steps_have_an_upper_bound(capsys):
    assert main(["train", "pg", "--set", "steps=10000000", "--set", "out=/nonexistent/x"]) == 2
    assert "steps" in capsys.readouterr().err


def test_a_fifo_is_written_through(tmp_path):
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    assert main(["eval", "oracle", "--samples", "1", "--out", str(fifo)]) == 0
    reader.join(timeout=30)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and len(got[0].splitlines()) == 20


def test_a_read_only_folder_is_one_line(tmp_path, capsys):
    """A folder no file can be made in: a 0500 folder, or, for root (whom modes do not stop),
    /proc."""
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    out = Path("/proc/arl-out.jsonl") if ROOT else folder / "r.jsonl"
    assert main(["eval", "oracle", "--samples", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"arl: error: cannot write {out}") and err.count("\n") == 1


@pytest.mark.parametrize("name", ["results.json", "config.json"])
def test_truncated_files_read_back_in_one_line(tmp_path, capsys, name):
    """A results.json cut mid-write (a problem run's read-back) and a cut --config file."""
    from dataclasses import asdict

    from arl.experiments import problems

    if name == "results.json":
        settings = {"problem": 2, "quick": True, "claim": asdict(problems.get(2).claim)}
        text = json.dumps({**settings, "per_seed": [{"seed": 0, "effect": 1.0}]})
        (tmp_path / name).write_text(text[: len(text) // 2])
        argv = ["reproduce", "problem", "2", "--quick", "--seeds", "1", "--out", str(tmp_path)]
    else:
        (tmp_path / name).write_text('{"steps": 4, "lr": ')
        argv = ["train", "pg", "--config", str(tmp_path / name), "--set", "out=x"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal" not in err and name in err


def test_a_torn_metrics_log_keeps_its_whole_rows(tmp_path):
    from arl.runio import read_jsonl

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "rew')
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    path.write_text('{"step": 1}\n{"step": 2\n{"step": 3}\n')
    with pytest.raises(Exception, match="metrics.jsonl:2: corrupt line"):
        read_jsonl(path)
