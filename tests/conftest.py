import os

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(1)  # tiny models are overhead-bound; one thread never stalls


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a test module, restored after it (a CLI call may change it)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory, one_thread):
    """A private base cache for one test module (its quick bases train once) and one thread."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ARL_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def vocab():
    from arl.bugfix import default_vocab

    return default_vocab()


@pytest.fixture()
def tiny_model(vocab):
    """A small randomly initialized TinyAgent (fixed seed)."""
    from arl.model import TinyAgent, TinyAgentConfig

    torch.manual_seed(0)
    return TinyAgent(TinyAgentConfig(vocab_size=len(vocab), n_layer=2, n_embd=32, n_head=4))


@pytest.fixture()
def cli(capsys):
    """Run `arl` in-process; returns (exit code, stdout, stderr), usage errors included."""
    from arl.cli.main import main

    def run(*argv):
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err

    return run


# --- running in parallel (pytest-xdist; scripts/test passes `-n auto --dist loadgroup`) -------
# Under `--dist loadgroup` the tests of one group run on one worker, one after another, while
# the other workers take the rest:
# - "ray": the modules built around a Ray instance or cluster (one at a time on the machine);
# - "cpu": modules whose tests start worker pools or sandboxes of their own;
# - "timing": tests that measure wall time (a deadline, a rate, a browser's load);
# - a module that trains its bases into a private cache (`private_cache`) is a group of its
#   own, so its bases are trained once, on one worker, not once on each.
XDIST_GROUPS = {
    "ray": ("test_ray_cluster", "test_pg_ray", "test_parallel"),
    "cpu": (
        "test_sandbox",
        "test_sandbox_grading",
        "test_parallel_schedule",
        "test_cli_reliability",
    ),
    "timing": ("test_progress", "test_report_browser"),
}
_GROUP_OF = {module: group for group, modules in XDIST_GROUPS.items() for module in modules}

# Each worker's Ray keeps its files (and its "current cluster" address) in a folder of its
# own, so a plain ray.init() on one worker never joins another worker's instance. Short, under
# /tmp: Ray's socket paths must stay under 108 bytes.
if os.environ.get("PYTEST_XDIST_WORKER") and "RAY_TMPDIR" not in os.environ:
    import tempfile

    os.environ["RAY_TMPDIR"] = _RAY_TMPDIR = tempfile.mkdtemp(prefix="arl-ray-", dir="/tmp")

    def pytest_sessionfinish(session, exitstatus):
        import shutil

        shutil.rmtree(_RAY_TMPDIR, ignore_errors=True)


# --- `scripts/test --fast` (-m "not slow"): the unit tests, a first green line in minutes -------
# Marked slow here: whole modules of end-to-end runs (reproductions, Ray, worker pools, real
# models, TRL) and the tests of others that took 2 s or more (a measured run, two workers on
# a loaded two-core machine); a test may also carry @pytest.mark.slow itself.
SLOW_MODULES = frozenset(
    "test_ch15 test_problems test_ray_cluster test_parallel test_pg_ray test_parallel_schedule "
    "test_scripts test_exercises test_problem_20 test_problem_23 test_problem_24 test_problem_25 "
    "test_problem_27 test_hf test_adopt test_bridge_trl test_cli_reliability test_bases "
    "test_distill test_cli_codefix test_pretrain".split()
)
SLOW_TESTS = {  # module -> test names (parametrized ones: every case)
    "test_judge": ("test_problem_10_quick_measures_and_draws",),
    "test_leak": (
        "test_problem_11_quick_measures_both_arms_and_draws",
        "test_audit_env_exit_codes",
    ),
    "test_pg": (
        "test_resume_from_a_damaged_run_is_one_clear_error_or_exact",
        "test_accumulation_identity",
        "test_exact_resume_after_an_interruption",
        "test_staleness_shows_in_the_sampler_mismatch",
        "test_each_step_logs_the_learning_rate_its_optimizer_stepped_with",
        "test_resume_refuses_a_changed_config_unless_allowed",
    ),
    "test_cli_robust": (
        "test_fuzz_every_numeric_flag",
        "test_fuzz_every_pg_number",
        "test_fuzz_input_files",
    ),
    "test_report": (
        "test_ch15_report_holds_the_table_and_every_figure",
        "test_problems_summary_report",
        "test_reports_render_in_a_browser",
        "test_a_nan_is_marked_where_it_was_logged",
        "test_every_standing_panel_is_drawn_when_its_metrics_are_logged",
    ),
    "test_export": (
        "test_tinyagent_table_in_trl_sft_routes",
        "test_model_pairs_in_trl_dpo",
        "test_tinyagent_pairs_in_trl_dpo",
        "test_model_trajectories_train_in_trl_sft_with_arls_loss",
    ),
    "test_logging_bridge": (
        "test_tensorboard_events_equal_metrics_jsonl",
        "test_train_distill_reports_its_teacher_metrics_to_tensorboard",
    ),
    "test_cli_numbers": ("test_sim_fleet_writes_results_and_figure", "test_sim_fleet_table"),
    "test_gym": (
        "test_flaky_rewards_flip_at_the_configured_rate",
        "test_nothing_the_policy_emits_crashes_the_env",
        "test_the_search_policy_stays_at_guessing_level",
    ),
    "test_codefix": ("test_no_shortcut_without_reading", "test_the_oracle_solves_every_task"),
    "test_layers": (
        "test_no_import_cycle_at_module_level",
        "test_no_module_imports_a_higher_layer",
    ),
    "test_sim": ("test_littles_law_on_problem_18",),
    "test_hf_toolcalls": (
        "test_eval_a_base_checkpoint_in_its_native_format_from_the_command_line",
    ),
}


def _slow(module: str, test: str) -> bool:
    return module in SLOW_MODULES or test.startswith(SLOW_TESTS.get(module, ()))


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = getattr(item, "module", None)
        if module is None:
            continue
        name = module.__name__.rsplit(".", 1)[-1]
        if _slow(name, item.name) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if name in _GROUP_OF:
            item.add_marker(pytest.mark.xdist_group(_GROUP_OF[name]))
        elif "private_cache" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(name))


@pytest.fixture(autouse=True)
def _fixed_seeds():
    """Every test starts from the same global seeds, whichever worker runs it, after what."""
    import random

    import numpy as np

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
