"""`arl sim fleet`: the rollout-fleet simulator (arl.sim) run from a config, with its figure."""

from __future__ import annotations

import argparse
from pathlib import Path

from arl.cli.args import seed_int
from arl.cli.output import emit, print_json
from arl.progress import Progress
from arl.runio import atomic_write_json, claim_output_dir, plain

NOTES = {
    "step_time_s": "mean after the first step",
    "engine_utilization": "decoding sequences / engine slots",
    "kv_peak_occupancy_engine": "> 1: the engine would have to preempt",
    "littles_law_lambda_w": "compare with in_flight_mean",
    "length_trained_mean": "policy tokens; compare with launched",
}


def _sim_fleet(args: argparse.Namespace) -> int:
    import dataclasses

    from arl.sim.config import FleetConfig
    from arl.sim.figure import plot_timeline
    from arl.sim.fleet import simulate

    cfg = FleetConfig.from_json(args.config) if args.config else FleetConfig()
    if args.seed is not None:
        cfg = dataclasses.replace(cfg, seed=args.seed)
    out_dir = Path(args.out)
    owned = ("results.json", "timeline.png")
    bar = Progress(
        "simulating steps", cfg.steps, delay_s=2.0, transient=True, enabled=not args.json
    )
    with claim_output_dir(out_dir, "sim fleet", owned, overwrite=args.overwrite, reuse=True), bar:
        result = simulate(cfg, on_step=lambda step, total: bar.update(step))
        fig = plot_timeline(result, cfg, out_dir / "timeline.png")
        payload = {
            "config": cfg.to_dict(),
            "report": result.report,
            "step_ends": result.step_ends,
            "figure": str(fig),
        }
        atomic_write_json(out_dir / "results.json", plain(payload))
    if args.json:
        print_json(payload)
        return 0
    r = result.report
    emit(
        {
            "title": f"fleet simulation ({cfg.mode}, seed {cfg.seed})",
            "inputs": {"config": str(args.config or "defaults (Problem 18)")},
            "results": {k: v for k, v in r.items() if not isinstance(v, dict)},
            "notes": {**NOTES, "staleness_mean": f"hist {r['staleness_hist']}"},
            "comments": [f"wrote {out_dir / 'results.json'} and {fig}"],
        },
        False,
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `sim` (fleet) to the `arl` parser."""
    p = sub.add_parser("sim", help="discrete-event simulators")
    ss = p.add_subparsers(dest="sim_command", required=True)
    f = ss.add_parser("fleet", help="rollout-fleet simulation (Chapter 13, Problem 18)")
    f.add_argument(
        "--config",
        type=Path,
        default=None,
        help="JSON config (keys of FleetConfig; default: Problem 18's numbers)",
    )
    f.add_argument("--out", default="runs/sim", help="directory for results.json, timeline.png")
    f.add_argument("--overwrite", action="store_true", help="replace another run's --out files")
    f.add_argument("--seed", type=seed_int, default=None, help="override the config's seed")
    f.add_argument("--json", action="store_true", help="print one JSON object")
    f.set_defaults(func=_sim_fleet)
