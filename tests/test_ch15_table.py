"""The Chapter 15 rules: the book's own numbers pass every rule, and each rule fails on a
hand-made result that breaks its claim (and only that rule)."""

import copy

import pytest

from arl.experiments.ch15_summary import aggregate, cost_table, markdown
from arl.experiments.ch15_table import above, converged_step, rows, se


def book_result() -> dict:
    """One seed's results as the book reports them (Chapter 15), in `ch15.run`'s layout."""
    fam = {"init": 0.9, "range": 0.95, "compare": 0.9, "minmax": 0.95, "div": 0.95}
    curve = [
        {"step": 0, "train": 0.14, "heldout": 0.14, "train_entropy": 0.25, "train_malformed": 0.06},
        {"step": 20, "train": 0.80, "heldout": 0.70, "train_entropy": 0.1, "train_malformed": 0.02},
        {
            "step": 40,
            "train": 0.99,
            "heldout": 0.92,
            "train_entropy": 0.02,
            "train_malformed": 0.0,
            "train_family": fam,
        },
        {
            "step": 60,
            "train": 0.99,
            "heldout": 0.93,
            "train_entropy": 0.02,
            "train_malformed": 0.0,
            "heldout_family": fam,
        },
    ]
    shares = {"init": 0.0, "range": 0.3, "compare": 0.4, "minmax": 0.2, "div": 0.1}
    ei = [(0.33, 84, 21), (0.68, 84, 21), (0.74, 150, 30), (0.75, 160, 30)]
    return {
        "eval_n": {"train": 80, "heldout": 40},
        "tokens": {
            "action_share": 0.19,
            "observation_share": 0.63,
            "masked_loss_init": 5.8,
            "unmasked_loss_init": 5.75,
            "log_vocab": 5.76,
        },
        "sft": {
            "weak_base": {
                "train": 0.14,
                "heldout": 0.14,
                "train_malformed": 0.06,
                "train_read": 0.29,
                "train_entropy": 0.25,
                "train_first_call_entropy": 0.5,
            },
            "oracle_sft_curve": curve,
            "cold_start": {"step": 20, "train_pass": 0.8, "reached": True},
            "copy_probe": {"weak_base": 0.0, "oracle_sft": 0.95},
        },
        "rft": {
            "identity": {
                "relative_error": 1e-7,
                "kept_token_ratio": 0.0935,
                "cosine_mean_baseline_sft": 0.985,
                "success_rate": 0.11,
            },
            "rounds": [
                {
                    "train": tr,
                    "heldout": 0.15,
                    "family_share": shares,
                    "kept": k,
                    "distinct_action_sequences": d,
                    "train_family": {**fam, "init": 0.0},
                }
                for tr, k, d in ei
            ],
        },
        "public_rft": {
            "rounds": [
                {"hack_share": 0.42, "train_public": 0.6, "train": 0.35},
                {"hack_share": 0.55, "train_public": 0.9, "train": 0.35},
                {"hack_share": 0.64, "train_public": 0.97, "train": 0.35},
            ]
        },
        "dpo": {
            "dpo": [
                {
                    "rejected_delta": -45.0,
                    "chosen_delta": 0.74,
                    "train": 0.41,
                    "train_malformed": 2.2,
                    "heldout": 0.0,
                }
            ],
            "dpo_nll": [
                {
                    "rejected_delta": -20.0,
                    "chosen_delta": 1.89,
                    "train": 0.69,
                    "train_malformed": 0.7,
                    "heldout": 0.17,
                }
            ],
        },
        "recipes": {
            "rl_only": [{"train_malformed": 0.1}],
            "curves": {
                "oracle_sft": [{"step": 60, "train": 0.99, "heldout": 0.93}],
                "rft": [{"step": 60, "train": 0.74, "heldout": 0.15}],
                "sft_then_rl": [{"step": 60, "train": 0.96, "heldout": 0.95}],
                "rl_only": [{"step": 60, "train": 0.36, "heldout": 0.30}],
            },
        },
        "groups": {
            "tasks": 10,
            "step_cold": {"mixed_fraction": 0.7},
            "step_final": {"mixed_fraction": 0.1},
        },
        "template": {
            "malformed_per_episode": 0.62,
            "train_pass": 0.075,
            "nll_per_action_token": 0.82,
            "nll_per_action_token_matched": 0.01,
        },
    }


def _curve_end(R, key, value):
    R["sft"]["oracle_sft_curve"][-1][key] = value


# row key -> a change that breaks exactly that claim
BREAKS = {
    "action_share": lambda R: R["tokens"].update(action_share=0.4),
    "init_losses": lambda R: R["tokens"].update(unmasked_loss_init=4.0),
    "weak_base": lambda R: R["sft"]["weak_base"].update(heldout=0.45),
    "weak_entropy": lambda R: R["sft"]["weak_base"].update(train_entropy=0.7),
    "oracle_sft": lambda R: _curve_end(R, "heldout", 0.75),
    "oracle_sft_speed": lambda R: R["sft"]["oracle_sft_curve"][2].update(train=0.80),
    "copy_probe": lambda R: R["sft"]["copy_probe"].update(oracle_sft=0.17),
    "rft_identity": lambda R: R["rft"]["identity"].update(relative_error=0.01),
    "expert_iteration": lambda R: R["rft"]["rounds"][-1].update(train=0.95),  # no plateau
    "dpo": lambda R: R["dpo"]["dpo"][-1].update(heldout=0.12),  # held-out does not fall
    "dpo_nll": lambda R: R["dpo"]["dpo_nll"][-1].update(train=0.45),  # not 2 SE above 0.41
    "four_recipes": lambda R: R["recipes"]["curves"]["sft_then_rl"][-1].update(train=0.80),
    "cold_start": lambda R: R["recipes"]["curves"]["rl_only"][-1].update(train=0.85),
    "rl_only": lambda R: R["recipes"]["curves"]["oracle_sft"][-1].update(heldout=0.40),
    "rl_only_moving": lambda R: R["recipes"]["curves"]["rl_only"][-1].update(train=0.18),
    "rft_transfer": lambda R: R["recipes"]["curves"]["rft"][-1].update(heldout=0.85),
    "mixed_groups": lambda R: R["groups"]["step_final"].update(mixed_fraction=0.5),
    "template_pass": lambda R: R["template"].update(nll_per_action_token=0.2),
    "template_malformed": lambda R: R["template"].update(malformed_per_episode=0.015),
    "kept_set": lambda R: R["rft"]["rounds"][1].update(distinct_action_sequences=60),
    "public_rft": lambda R: R["public_rft"]["rounds"][-1].update(hack_share=0.3),
}


def test_the_books_own_numbers_pass_every_rule():
    failing = [r.key for r in rows(book_result()) if not r.reproduced]
    assert failing == []


def test_every_row_has_a_break():
    assert {r.key for r in rows(book_result())} == set(BREAKS)


@pytest.mark.parametrize("key", sorted(BREAKS))
def test_each_rule_fails_on_a_result_that_breaks_it(key):
    R = copy.deepcopy(book_result())
    BREAKS[key](R)
    verdicts = {r.key: r.reproduced for r in rows(R)}
    assert verdicts[key] is False
    assert all(v for k, v in verdicts.items() if k != key), verdicts


def test_expert_iteration_needs_init_unlearned_not_unkept():
    """The ceiling's cause is that no round learns init; a rare init success kept in round 1
    (the weak base copies a name now and then) does not break it, an init pass of 0.2 does."""
    R = copy.deepcopy(book_result())
    R["rft"]["rounds"][0]["family_share"]["init"] = 0.05
    assert next(r for r in rows(R) if r.key == "expert_iteration").reproduced
    R["rft"]["rounds"][-1]["train_family"]["init"] = 0.2
    assert not next(r for r in rows(R) if r.key == "expert_iteration").reproduced


def test_margins_are_two_standard_errors():
    assert se(0.5, 100) == pytest.approx(0.05, abs=1e-3)
    assert se(0.0, 100) > 0  # an all-fail evaluation still has an uncertainty
    assert not above(0.41, 80, 0.38, 80)  # the ordering the first build called "yes"
    assert above(0.9, 240, 0.3, 240, by=0.15)
    assert not above(0.5, 240, 0.4, 240, by=0.15)


def test_aggregate_counts_seeds_and_needs_four_of_five():
    good, bad = book_result(), copy.deepcopy(book_result())
    BREAKS["oracle_sft"](bad)
    table = aggregate([rows(good)] * 4 + [rows(bad)])
    row = next(r for r in table if r["key"] == "oracle_sft")
    assert (row["seeds_holding"], row["seeds"], row["reproduced"]) == (4, 5, True)
    assert row["mean"]["ho"] == pytest.approx((4 * 0.93 + 0.75) / 5)
    assert row["se"]["ho"] == pytest.approx(0.036, abs=1e-3)
    table = aggregate([rows(good)] * 3 + [rows(bad)] * 2)
    assert not next(r for r in table if r["key"] == "oracle_sft")["reproduced"]
    assert "3/5" in markdown(table) and "Quick settings" in markdown(table, quick=True)


def test_the_template_row_prints_the_wrong_op_share_when_the_run_recorded_it():
    """Runs saved before `op_choice` existed are retabled without it; newer ones show it."""
    R = copy.deepcopy(book_result())
    row = next(r for r in rows(R) if r.key == "template_malformed")
    assert "wrong" not in row.measured and "op" not in row.fmt
    R["template"]["op_choice"] = {"right_op": 0.6, "wrong_op": 0.3, "no_edit": 0.1}
    new = next(r for r in rows(R) if r.key == "template_malformed")
    assert new.measured["wrong"] == 0.3 and new.reproduced == row.reproduced
    assert "another family's op in 30%" in markdown(aggregate([rows(R)]))


def test_converged_step_is_the_first_from_which_train_stays_near_its_final_value():
    curve = [{"step": 10 * i, "train": p} for i, p in enumerate([0.1, 0.5, 0.96, 0.93, 0.99])]
    assert converged_step(curve) == 40  # 0.96 is within 0.05 of 0.99, but 0.93 after it is not
    curve[3]["train"] = 0.95
    assert converged_step(curve) == 20
    assert converged_step(curve[:1]) == 0  # a one-point curve has converged at its only step


def test_the_speed_row_prints_init_and_the_lowest_family_at_step_40():
    R = book_result()
    speed = lambda R: next(r for r in rows(R) if r.key == "oracle_sft_speed")  # noqa: E731
    assert "init 0.90, lowest family 0.90)" in speed(R).fmt.format(**speed(R).measured)
    R["sft"]["oracle_sft_curve"][2]["train_family"]["compare"] = 0.6  # another family lags
    row = speed(R)
    assert "init 0.90, lowest family 0.60)" in row.fmt.format(**row.measured)
    assert row.reproduced  # what it prints does not change the verdict


def test_the_mixed_groups_margin_counts_groups_not_tasks():
    """30% against 0% is under 2 SE over 10 groups (one per task) and over it with 100."""
    R = book_result()
    R["groups"] = {
        "tasks": 10,
        "step_cold": {"mixed_fraction": 0.3},
        "step_final": {"mixed_fraction": 0.0},
    }
    verdict = lambda: next(r.reproduced for r in rows(R) if r.key == "mixed_groups")  # noqa: E731
    assert not verdict()  # a run saved before groups were counted: n is the 10 tasks
    R["groups"]["groups"] = 100
    assert verdict()
    assert "over 100 held-out groups" in next(r.rule for r in rows(R) if r.key == "mixed_groups")


def test_one_seed_has_no_spread_and_the_tables_are_markdown():
    table = aggregate([rows(book_result())])
    assert all(row["seeds"] == 1 and set(row["se"].values()) == {None} for row in table)
    lines = markdown(table).splitlines()
    # the book's claims and the lab's hypotheses counted apart, then the table
    n_lab = sum(r["source"] == "lab" for r in table)
    assert lines[0] == (
        f"book claims: {sum(r['reproduced'] for r in table if r['source'] == 'book')} of "
        f"{len(table) - n_lab} reproduce; lab hypotheses: "
        f"{sum(r['reproduced'] for r in table if r['source'] == 'lab')} of {n_lab} reproduce."
    )
    assert n_lab == 1 and next(r["key"] for r in table if r["source"] == "lab") == "copy_probe"
    assert lines[3] == "| --- | --- | --- | --- | --- | --- |"
    assert lines[4].startswith("| book | action share")
    assert lines[4].endswith("| yes (1/1) | " + table[0]["rule"] + " |")
    cost = {"rft": {"demonstrations": 0, "sampled_episodes": 320, "verifier_calls": 320}}
    assert cost_table(cost) == (
        "| recipe | demonstrations | sampled episodes | verifier calls |\n"
        "| --- | --- | --- | --- |\n| rft | 0 | 320 | 320 |\n"
    )


def test_the_transfer_rows_report_the_fresh_split_beside_held_out():
    """A run that measured the fresh split prints it in the oracle-SFT, four-recipes,
    cold-start and RL-only rows (a run saved before it prints none); the rules stay on
    held-out."""
    R = book_result()
    before = {r.key: (r.measured, r.reproduced) for r in rows(R)}
    assert not any("fresh" in r.fmt for r in rows(R))
    R["sft"]["fresh"] = {"oracle_sft": {"fresh": 0.83}, "weak_base": {"fresh": 0.1}}
    R["recipes"]["fresh"] = {
        "oracle_sft": 0.83,
        "sft_then_rl": 0.8,
        "rl_only": 0.21,
        "weak_base": 0.1,
    }
    got = {r.key: r for r in rows(R)}
    text = lambda key: got[key].fmt.format(**got[key].measured)  # noqa: E731
    assert "fresh 0.83" in text("oracle_sft")
    assert "fresh: oracle SFT 0.83, SFT+RL 0.80, RL only 0.21" in text("four_recipes")
    assert "(fresh +0.59)" in text("cold_start")
    assert "(fresh: 0.21 against 0.83 and 0.80)" in text("rl_only")
    assert {k: r.reproduced for k, r in got.items()} == {k: v[1] for k, v in before.items()}
