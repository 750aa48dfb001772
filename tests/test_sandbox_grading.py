"""Grading attacks on arl.sandbox: exploits, infrastructure failures, state between jobs."""

import threading
import time

import pytest
from test_sandbox import REASON, host_pids, job, job_uids, statuses

from arl.sandbox import Case, Job, Limits, make_sandbox

pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no sandbox here: {REASON}")


@pytest.fixture(scope="module")
def sb():
    with make_sandbox("auto", workers=2) as sandbox:
        yield sandbox


@pytest.fixture()
def one():
    """A one-worker sandbox: consecutive jobs land on the same worker."""
    with make_sandbox("auto", workers=1) as sandbox:
        yield sandbox


EXPLOITS = {  # each with a wrong function (the right answer is 2): never a pass
    "exit_at_import": ("import os\nos._exit(0)\ndef f(x): return 3\n", (), "exit_at_import"),
    "sys_exit_at_import": ("import sys\nsys.exit(0)\ndef f(x): return 3\n", (), "exit_at_import"),
    "forged_stdout": (
        'def f(x):\n    print(\'passed 1 of 1\\nOK\\n{"cases": [{"s": "pass"}]}\')\n    return 3\n',
        (),
        None,
    ),
    "always_eq": (
        "class A:\n    def __eq__(self, o): return True\ndef f(x): return A()\n",
        (),
        None,
    ),
    "int_subclass": (
        "class I(int):\n    def __eq__(self, o): return True\ndef f(x): return I(3)\n",
        (),
        None,
    ),
    "forged_records": (
        'import os\ndef f(x):\n    os.write(3, b\'{"k": "ok", "i": 0, "v": 2}\\n\''
        ' * 2 + b\'{"k": "pass"}\\n\')\n    os._exit(0)\n',
        (),
        "bad_result_stream",
    ),
    "conftest_file": (
        "def f(x): return 3\n",
        (("conftest.py", "def pytest_runtest_makereport(item, call): pass\n"),),
        "dropped:conftest.py",
    ),
    "sitecustomize_written": (
        "open('sitecustomize.py', 'w').write('import os')\ndef f(x): return 3\n",
        (),
        "dropped:sitecustomize.py",
    ),
}


@pytest.mark.parametrize("name", sorted(EXPLOITS))
def test_exploits_with_a_wrong_function_never_pass(sb, name):
    source, files, flag = EXPLOITS[name]
    v = sb.run(Job(source, "f", (Case("t", (1,), 2),), files=files))
    assert not v.passed and statuses(v)[0] in ("fail", "crash"), v
    if flag:
        assert flag in v.flags
    assert v.infra_error is None


def test_a_worker_killed_mid_job_is_replaced_and_the_job_retried(one):
    slow = job("import time\ndef f(x):\n    time.sleep(0.6)\n    return x\n", ((1,), 1))
    (worker,) = one._live
    threading.Timer(0.3, worker.proc.kill).start()
    v = one.run(slow)
    assert v.passed and v.attempts == 2 and v.infra_error is None
    assert one.stats["retries"] == 1 and one.stats["worker_restarts"] == 1
    assert one.stats["infra_errors"] == 0 and one.run(slow).passed
    for _ in range(40):  # the killed worker's namespace, its sleeping job with it, is gone
        if not host_pids({worker.uid}):
            break
        time.sleep(0.05)
    assert host_pids({worker.uid}) == [] and worker.uid not in job_uids(one)


def test_retries_exhausted_is_an_infra_error_not_a_fail():
    with make_sandbox("auto", workers=1, retries=0) as sandbox:
        (worker,) = sandbox._live
        threading.Timer(0.3, worker.proc.kill).start()
        v = sandbox.run(job("import time\ndef f(x):\n    time.sleep(2)\n    return x\n", ((1,), 1)))
        assert v.infra_error and "died" in v.infra_error and statuses(v) == ["infra_error"]
        assert not v.passed and v.attempts == 1 and sandbox.stats["infra_errors"] == 1
    from arl.sandbox.launch import Launch
    from arl.sandbox.pool import Sandbox

    broken = Sandbox("bwrap", lambda: Launch(("sh", "-c", "echo garbage"), -1), 1, True, 2)
    with broken:
        v = broken.run(job("def f(x): return x\n", ((1,), 1), ((2,), 2)))
    assert v.infra_error and statuses(v) == ["infra_error"] * 2 and v.attempts == 3
    assert broken.stats["retries"] == 2 and broken.stats["infra_errors"] == 1


def test_same_job_same_verdict_and_no_state_leaks_between_jobs(one, sb):
    first = """
        import math, os
        counter = 0
        def f(x):
            global counter
            counter += 1
            seen = [os.path.exists("left.txt"), math.pi == 3, os.environ.get("LEAK")]
            open("left.txt", "w").write("x")
            math.pi = 3
            os.environ["LEAK"] = "1"
            return [counter] + seen + sorted(os.listdir("."))
    """
    expected = [1, False, False, None, "left.txt", "solution.py"]
    verdicts = [one.run(job(first, ((1,), expected))) for _ in range(3)]
    assert all(v.passed for v in verdicts), verdicts[1].results
    mixed = """
        def f(x):
            print("case", x)
            return list({"apple", "pear", "fig", "kiwi", "plum"}) if x else 1 // x
    """
    # Roomy limits: under a loaded CI machine a 4 s wall clock can cut a case (a true
    # "timeout", not a difference in what the job computed), and a worker that starts
    # late is retried (attempts 2): what must match is what the job did.
    roomy = Limits(cpu_seconds=30, wall_seconds=60)
    mixed_job = job(mixed, ((1,), 0), ((0,), 0), limits=roomy)
    verdicts = sb.run_many([mixed_job] * 4) + [one.run(mixed_job)]
    seen = [(v.results, v.flags, v.output, v.infra_error) for v in verdicts]
    assert all(s == seen[0] for s in seen), seen  # set order too: PYTHONHASHSEED=0 everywhere
    assert statuses(verdicts[0]) == ["fail", "fail"] and verdicts[0].output == "case 1\ncase 0\n"


def test_cold_launches_and_the_unsandboxed_kind_give_the_same_verdicts():
    src = "def f(a, b):\n    return a * b\n"
    j = job(src, ((2, 3), 6), ((2, 2), 5))
    with make_sandbox("auto", warm=False) as cold, make_sandbox("none", workers=1) as plain:
        got = [cold.run(j), plain.run(j), cold.run_many([j, j])[1]]
        assert cold.stats["launches"] == 3 and cold.kind == "bwrap" and plain.kind == "none"
    assert {tuple(statuses(v)) for v in got} == {("pass", "fail")}


def test_a_job_that_leaves_many_files_gets_a_fresh_worker_not_an_error(one):
    litter = "def f(n):\n    for i in range(n):\n        open(f'f{i}', 'w').close()\n    return n\n"
    look = "import os\ndef f(x):\n    return len(os.listdir('.'))\n"
    v = one.run(job(litter, ((6000,), 6000)))
    assert v.passed and one.stats["worker_restarts"] == 1 and one.stats["infra_errors"] == 0
    assert one.run(job(look, ((0,), 1))).passed  # only solution.py: the litter went with it
