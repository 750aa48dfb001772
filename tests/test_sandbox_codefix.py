"""CodeFix's side of the sandbox's promises (issue 42): what a module's job can show the
policy, what a module's text can do to the host's rollout, and what the verdict cache keeps."""

import json

import pytest

from arl.codefix import CodeFixEnv, get_task, grade, tasks_for
from arl.sandbox import Case, sandbox_available

pytestmark = pytest.mark.skipif(
    sandbox_available() is not None, reason=f"no sandbox here: {sandbox_available()}"
)
END = "<end>"

# Walks its frames to the child's request and raises with every case's input, last first.
DUMPER = """
import sys

def {name}(*args):
    fr = sys._getframe()
    while fr is not None:
        req = fr.f_locals.get("req")
        if isinstance(req, dict) and "args" in req:
            raise LookupError("".join(reversed(req["args"])))
        fr = fr.f_back
    raise LookupError("no request")
"""


def _env(task, source):
    env = CodeFixEnv(task)
    env.reset(seed=0)
    env.source = source
    return env


def test_hidden_inputs_never_appear_in_an_observation():
    grade.clear_cache()
    leaked = []
    for task in tasks_for("train")[::4]:
        env = _env(task, DUMPER.format(name=task.name))
        seen = [env.step(["test", END])[0], env.step(["submit", END])[0]]
        text = " ".join(o.text + " " + " ".join(o.words) for o in seen)
        public = {json.dumps(list(c.args)) for c in task.public}
        assert any(p in text for p in public), text  # the dump works: public inputs show
        leaked += [
            (task.name, h)
            for c in task.hidden
            if (h := json.dumps(list(c.args))) not in public and h in text
        ]
    assert not leaked


def test_a_lone_surrogate_in_a_job_renders_through_a_real_chat_template():
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from arl.hf.chat import ChatRenderer
    from arl.hf.tiny import build_tokenizer

    renderer = ChatRenderer.for_tokenizer(build_tokenizer(vocab_size=300))
    task = tasks_for("train")[0]
    for source in (
        f'def {task.name}(*a):\n    raise ValueError("\\ud800")\n',
        f'def {task.name}(*a):\n    print("\\udcff")\n    return "\\ud800"\n',
    ):
        obs = _env(task, source).step(["test", END])[0]
        obs.text.encode("utf-8")
        ids, owners, _ = renderer.render_observation([], "test", obs.text)
        assert ids and len(ids) == len(owners)
    assert "\\ud800" in obs.text or "fail" in obs.text
    env = _env(task, "x = 1\n")  # an edit whose text holds a lone surrogate: a fail, not a crash
    env.source = f'def {task.name}(*a):\n    return "\ud800"\n'
    obs = env.step(["test", END])[0]
    assert "not valid UTF-8" in obs.text and "passed 0 of" in obs.text
    renderer.render_observation([], "test", obs.text)
    outcome = env.step(["submit", END])[4]
    assert outcome.score <= 0 and not outcome.hidden_pass


def test_a_verdict_that_may_not_come_again_is_never_cached():
    grade.clear_cache()
    kind = grade.sandbox_kind(False)
    source = (
        "import os, time\n"
        "def f(x):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(5)\n"
        "        os._exit(0)\n"
        "    return x\n"
    )
    cases = (Case("t0", (1,), 1),)
    first = grade.run(source, "f", cases, kind)
    assert "left_processes" in first.flags
    hits = grade.stats["cache_hits"]
    grade.run(source, "f", cases, kind)
    assert grade.stats["cache_hits"] == hits  # run again, not taken from the cache
    honest = "def f(x):\n    return x\n"
    grade.run(honest, "f", cases, kind)
    grade.run(honest, "f", cases, kind)
    assert grade.stats["cache_hits"] == hits + 1


def test_test_and_the_final_grading_are_separate_jobs_each_cached():
    grade.clear_cache()
    task = get_task(tasks_for("train")[0].name)
    env = CodeFixEnv(task)
    env.reset(seed=0)
    before = dict(grade.stats)
    env.step(["test", END])
    env.step(["submit", END])
    jobs = grade.stats["jobs"] - before["jobs"]
    hits = grade.stats["cache_hits"] - before["cache_hits"]
    # test: public and hidden, two jobs side by side; finish: both from the cache
    assert (jobs, hits) == (4, 2)
    env.reset(seed=1)  # no test call: the final grading is one job
    env.source += "\n"
    before = dict(grade.stats)
    env.step(["submit", END])
    assert grade.stats["jobs"] - before["jobs"] == 1


def test_allow_unsandboxed_warns_and_eval_and_train_record_the_sandbox(cli, monkeypatch, tmp_path):
    import torch

    from arl.model import TinyAgent, TinyAgentConfig
    from arl.rollout import vocab_of
    from arl.train.checkpoint import save_checkpoint

    argv = ("eval", "oracle", "--env", "codefix", "--samples", "1", "--json")
    code, out, err = cli(*argv, "--allow-unsandboxed")  # bubblewrap works: it is used
    assert code == 0 and json.loads(out)["sandbox"] == "bwrap" and "WITHOUT" not in err
    from arl.envkit import graded

    monkeypatch.setattr(graded, "sandbox_available", lambda: "bubblewrap (bwrap) not found: x")
    monkeypatch.setattr(grade.GRADER, "warned", [])
    code, out, err = cli(*argv, "--allow-unsandboxed")
    assert code == 0 and json.loads(out)["sandbox"] == "none"
    assert "WARNING: running policy code WITHOUT a sandbox" in err
    torch.manual_seed(0)
    shape = dict(n_layer=1, n_embd=32, n_head=2, block_size=256)
    init = save_checkpoint(
        TinyAgent(TinyAgentConfig(vocab_size=len(vocab_of("codefix")), **shape)), tmp_path / "i"
    )
    run = tmp_path / "run"
    small = ["tasks_per_step=2", "group_size=2", "minibatches=1", "steps=1", f"out={run}"]
    sets = [a for s in small for a in ("--set", s)]
    code, _, err = cli(
        "train", "pg", "--init", str(init), "--env", "codefix", "--quiet",
        "--allow-unsandboxed", *sets,
    )  # fmt: skip
    assert code == 0, err
    assert json.loads((run / "config.json").read_text())["sandbox"] == "none"
