import json

import pytest

from arl.cli.main import main
from arl.experiments.ch15 import Row, aggregate_rows, markdown_table

KEYS = {"action_share", "init_losses", "weak_base", "oracle_sft", "rft_identity",
        "expert_iteration", "dpo", "dpo_nll", "four_recipes", "mixed_groups", "template",
        "kept_set", "public_rft"}  # fmt: skip


def test_aggregate_rows_mean_spread_and_verdict_count():
    a = [Row("k", "q", "b", {"x": 1.0}, "{x:.1f}", True, "r")]
    b = [Row("k", "q", "b", {"x": 3.0}, "{x:.1f}", False, "r")]
    (row,) = aggregate_rows([a, b])
    assert row["measured"] == "2.0" and row["spread"] == {"x": 1.0}
    assert row["reproduced_seeds"] == "1/2" and row["reproduced"] is False
    assert "(1/2 seeds)" in markdown_table([row], seeds=2)


@pytest.mark.slow
def test_reproduce_ch15_quick_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ARL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "ch15"
    assert main(["reproduce", "ch15", "--quick", "--seeds", "2", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["seeds"] == [0, 1] and len(results["runs"]) == 2
    assert not (out / "results.partial.json").exists()
    assert {row["key"] for row in results["table"]} == KEYS
    assert all(row["book"] and row["measured"] for row in results["table"])
    assert all(row["spread"] is not None and row["reproduced_seeds"].endswith("/2")
               for row in results["table"])  # fmt: skip
    by_key = {row["key"]: row for row in results["table"]}
    assert by_key["rft_identity"]["reproduced"]  # an exact identity holds even in a quick run
    assert by_key["action_share"]["reproduced"]
    for name in results["figures"]:
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    md = (out / "table.md").read_text()
    assert md.split("\n\n")[0].count("\n") == len(KEYS) + 1  # header, rule, one line per row
    assert "| rft | 0 |" in md  # the cost table: RFT uses no demonstrations
    assert "seeds)" in (out / "table.md").read_text()
    assert (out / "checkpoints" / "sft_cold" / "model.safetensors").is_file()
    assert "Chapter 15 reproduced" in capsys.readouterr().out
