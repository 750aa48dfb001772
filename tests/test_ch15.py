import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from arl.bugfix import default_vocab
from arl.bugfix.tasks import tasks_for
from arl.cli.main import main
from arl.cli.reproduce import print_ch15
from arl.envkit.families import ACCUMULATORS
from arl.errors import ArlError
from arl.experiments import ch15, ch15_plan, ch15_seeds
from arl.experiments.ch15_probes import copy_probe
from arl.train.pg_config import minimal_reinforce
from tests.test_ch15_table import BREAKS

KEYS = set(BREAKS)


class _Copier(torch.nn.Module):
    """A fake policy whose next token is any accumulator name in its input (a perfect copier),
    or always `total` (a memorizer)."""

    def __init__(self, copies: bool):
        super().__init__()
        self.copies = copies
        v = default_vocab()
        self.names = torch.tensor([v.id(n) for n in ACCUMULATORS])
        self.total, self.V = v.id("total"), len(v)

    def forward(self, idx):
        logits = torch.zeros(*idx.shape, self.V)  # (B, T, V)
        if not self.copies:
            logits[..., self.total] = 1.0
            return logits, None
        for b in range(idx.shape[0]):
            seen = idx[b][torch.isin(idx[b], self.names)]
            logits[b, :, seen] = 1.0  # the name shown in the listing (and nothing after padding)
        return logits, None


def test_copy_probe_tells_copying_from_a_memorized_name():
    tasks = tasks_for("train") + tasks_for("heldout")
    assert copy_probe(_Copier(copies=True), tasks) == {"copy_rate": 1.0, "probes": 36}
    assert copy_probe(_Copier(copies=False), tasks)["copy_rate"] == pytest.approx(1 / 6)


@pytest.mark.slow
def test_reproduce_ch15_quick_end_to_end(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("ARL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "ch15"
    assert (
        main(["reproduce", "ch15", "--quick", "--seeds", "2", "--workers", "1", "--out", str(out)])
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert results["seeds"] == [0, 1] and len(results["runs"]) == 2
    assert not (out / "results.partial.json").exists()
    assert {row["key"] for row in results["table"]} == KEYS
    assert all(row["seeds"] == 2 and row["se"] is not None for row in results["table"])
    by_key = {row["key"]: row for row in results["table"]}
    assert by_key["rft_identity"]["reproduced"]  # an exact identity holds even in a quick run
    assert by_key["action_share"]["reproduced"]
    for name in results["figures"]:
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    md = (out / "table.md").read_text()
    assert "Quick settings" in md and "| rft | 0 |" in md  # RFT uses no demonstrations
    assert (out / "checkpoints" / "sft_cold" / "model.safetensors").is_file()
    captured = capfd.readouterr()
    assert "QUICK settings" in captured.out and "[seed 1] dpo" in captured.err
    assert "arl reproduce ch15: seeds 0..1 in 1 process (quick settings)" in captured.err
    print_ch15({**results, "runs": results["runs"][:1]}, out)  # one seed: one number, no range
    one = round(sum(results["runs"][0]["timings_s"].values()))
    assert f"time per seed: {one} s of compute" in capfd.readouterr().out
    # lines from inside a section too (the first at once, then at most one per 20 s)
    assert "[seed 1] sft: weak base: pretraining step 1/20 (at" in captured.err
    # the same seeds as tasks on two processes, from an empty cache: the same bytes
    monkeypatch.setenv("ARL_CACHE", str(tmp_path / "cache2"))
    out2 = tmp_path / "ch15-2"
    argv = ["reproduce", "ch15", "--quick", "--seeds", "2", "--workers", "2", "--out", str(out2)]
    assert main(argv) == 0
    err2 = capfd.readouterr().err
    assert "seeds 0..1 in 2 processes" in err2 and "[seed 1] dpo (at" in err2
    assert "[seed 1] sft: weak base: pretraining step 1/20 (at" in err2  # from a worker
    assert same_but_timings(out2 / "results.json", out / "results.json")
    assert (out2 / "table.md").read_text() == md
    for name in ("weak_base", "sft_cold", "sft_final"):
        for f in ("model.safetensors", "config.json"):
            ckpt = f"checkpoints/{name}/{f}"
            assert (out2 / ckpt).read_bytes() == (out / ckpt).read_bytes()
    timed = json.loads((out2 / "results.json").read_text())["runs"][0]["timings_s"]
    assert list(timed) == list(results["runs"][0]["timings_s"]) == list(ch15.SECTIONS)
    # an occupied output folder is refused, in one line, with exit status 2
    assert main(["reproduce", "ch15", "--quick", "--out", str(out)]) == 2
    err = capfd.readouterr().err
    assert "holds a finished run" in err and "ch15: seed 0 in " in err  # one seed: no range
    # --retable recomputes the table of the finished run without running anything
    (out / "table.md").unlink()
    assert main(["reproduce", "ch15", "--retable", "--out", str(out)]) == 0
    assert (out / "table.md").read_text() == md
    # ... also of a run saved before the RL settings were a PGConfig (only the runs are read)
    old = json.loads((out / "results.json").read_text())
    old["config"] = {**_flat_rl(old["config"]), "rl_steps_only": 4}
    ch15_seeds.atomic_write_json(out / "results.json", old)
    (out / "table.md").unlink()
    assert main(["reproduce", "ch15", "--retable", "--out", str(out)]) == 0
    assert (out / "table.md").read_text() == md


def same_but_timings(a, b) -> bool:
    """Two results.json files byte-equal (as JSON dumps them) but for each run's timings_s."""
    runs = [json.loads(p.read_text()) for p in (a, b)]
    for payload in runs:
        for R in payload["runs"]:
            R["timings_s"] = None
    return json.dumps(runs[0]) == json.dumps(runs[1])


def _flat_rl(config: dict) -> dict:
    """A saved config as arl wrote it before Ch15Config held a PGConfig: flat rl_* fields."""
    config = {k: v for k, v in config.items() if k != "rl"}
    rl = {"rl_group": 8, "rl_tasks_per_step": 8, "rl_lr": 2e-4, "rl_steps_only": 60}
    return {**config, **rl}


def test_the_rl_arms_are_a_pgconfig_whose_quick_form_is_pgconfigs(tmp_path):
    cfg = ch15.Ch15Config()
    assert cfg.rl == minimal_reinforce(lr=2e-4, steps=60)
    rl = cfg.rl
    assert (rl.group_size, rl.tasks_per_step, rl.baseline, rl.clip) == (8, 8, "mean", False)
    quick = cfg.quick()
    assert quick.rl == cfg.rl.quick() and quick.rl_steps_cold == quick.rl.steps == 4
    # a partial run saved before then cannot resume: refused in one line that says why
    saved = ch15_seeds._settings(quick, True)
    saved = {**saved, "config": _flat_rl(saved["config"]), "runs": []}
    ch15_seeds.atomic_write_json(tmp_path / "results.partial.json", saved)
    with pytest.raises(ArlError, match="older arl") as e:
        ch15_seeds.resume_state(tmp_path, quick, True)
    assert "\n" not in str(e.value) and "--overwrite" in str(e.value)


@pytest.mark.slow
def test_a_killed_run_resumes_without_rerunning_finished_seeds(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("ARL_CACHE", str(tmp_path / "cache"))
    cfg, out = ch15.Ch15Config().quick(), tmp_path / "ch15"
    calls = []
    real = ch15_seeds.run_seed

    def dies_on_seed_1(cfg, seed, checkpoints=""):
        calls.append(seed)
        if seed == 1 and calls.count(1) == 1:
            raise KeyboardInterrupt  # the run is killed while seed 1 runs
        return real(cfg, seed, checkpoints)

    monkeypatch.setattr(ch15_seeds, "run_seed", dies_on_seed_1)
    with pytest.raises(KeyboardInterrupt):
        ch15_seeds.run_seeds(cfg, [0, 1], out, quick=True)
    partial = json.loads((out / "results.partial.json").read_text())
    assert [R["seed"] for R in partial["runs"]] == [0]
    payload = ch15_seeds.run_seeds(cfg, [0, 1], out, quick=True)
    assert calls == [0, 1, 1]  # seed 0 was not run again
    assert [R["seed"] for R in payload["runs"]] == [0, 1]
    # same seed, same bytes: seed 0 kept from the partial file equals a fresh run of it, here
    # alone with two workers, so its sections as tasks on two processes (ch15_plan)
    capfd.readouterr()
    fresh = ch15_seeds.run_seeds(cfg, [0], tmp_path / "again", quick=True, workers=2)
    assert calls == [0, 1, 1]  # not run whole: its tasks ran
    err = capfd.readouterr().err
    assert "[seed 0] dpo: step 0: train" in err  # the DPO task reports from its process
    assert "[seed 0] sft: oracle SFT (at" in err and "[seed 0] recipes: RL from the" in err
    assert json.dumps(fresh["runs"][0]) == json.dumps(
        {**payload["runs"][0], "timings_s": fresh["runs"][0]["timings_s"]}
    )
    # a partial run made with other settings is not mixed in
    ch15_seeds.atomic_write_json(out / "results.partial.json", {**partial, "quick": False})
    (out / "results.json").unlink()
    with pytest.raises(ch15_seeds.ArlError, match="other settings"):
        ch15_seeds.run_seeds(replace(cfg, eval_samples=2), [0, 1], out, quick=True)


@pytest.mark.slow
def test_seeds_on_ray_give_the_table_of_seeds_in_one_process(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'arl[ray]')")
    monkeypatch.setenv("ARL_CACHE", str(tmp_path / "cache"))
    cfg = ch15.Ch15Config().quick()
    one = ch15_seeds.run_seeds(cfg, [0, 1], tmp_path / "one", quick=True)
    try:
        on_ray = ch15_seeds.run_seeds(
            cfg, [0, 1], tmp_path / "ray", quick=True, workers=2, ray="local"
        )
    finally:
        ray.shutdown()
    strip = lambda runs: [{k: v for k, v in R.items() if k != "timings_s"} for R in runs]  # noqa: E731
    assert json.dumps(strip(on_ray["runs"])) == json.dumps(strip(one["runs"]))
    assert on_ray["table"] == one["table"]


def template_failing_for_seed_1(cfg, got):
    """ch15_plan's template task, but seed 1's fails once seed 0 is saved (the file named by
    $ARL_TEST_PARTIAL exists): a failure in one task while another seed is done."""
    if cfg.base.seed != 1:
        return ch15_plan._template(cfg, got)
    partial = Path(os.environ["ARL_TEST_PARTIAL"])
    for _ in range(6000):
        if partial.exists():
            break
        time.sleep(0.1)
    raise RuntimeError("broken on purpose")


@pytest.mark.slow
def test_a_failing_task_stops_the_run_in_one_line_and_finished_seeds_are_kept(
    tmp_path, monkeypatch, capfd
):
    import multiprocessing

    monkeypatch.setenv("ARL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "ch15"
    monkeypatch.setenv("ARL_TEST_PARTIAL", str(out / "results.partial.json"))
    real = ch15_plan.PLAN
    failing = replace(next(t for t in real if t.name == "template"), fn=template_failing_for_seed_1)
    monkeypatch.setattr(
        ch15_plan, "PLAN", tuple(failing if t.name == "template" else t for t in real)
    )
    argv = ["reproduce", "ch15", "--quick", "--seeds", "2", "--workers", "2", "--out", str(out)]
    assert main(argv) == 1
    err = capfd.readouterr().err
    line = "arl: internal error: JobFailed: [seed 1] template: RuntimeError: broken on purpose"
    assert [x for x in err.splitlines() if x.startswith("arl:")][-1].startswith(line)
    assert "Traceback" not in err and multiprocessing.active_children() == []
    partial = json.loads((out / "results.partial.json").read_text())
    assert [R["seed"] for R in partial["runs"]] == [0]  # seed 0 was saved, seed 1 was not
    # run again: seed 0 is read back, not rerun; seed 1 runs
    monkeypatch.setattr(ch15_plan, "PLAN", real)
    assert main(argv) == 0
    err = capfd.readouterr().err
    assert "resuming: seeds [0]" in err and "[seed 0]" not in err and "[seed 1] template" in err
    results = json.loads((out / "results.json").read_text())
    assert [R["seed"] for R in results["runs"]] == [0, 1] and results["runs"][0] == partial["runs"][
        0
    ]


def test_mixed_groups_cuts_each_tasks_outcomes_into_groups():
    T, F = True, False
    outcomes = {"a": [T, F, F, F, T, T], "b": [F, F, T, F, F, F, T]}  # b's last one is no group
    assert ch15.mixed_groups(outcomes, 2) == [True, False, False] + [False, True, False]
    assert ch15.mixed_groups(outcomes, 3) == [True, True] + [True, False]
    assert ch15.mixed_groups({"a": [T] * 8}, 8) == [False]
