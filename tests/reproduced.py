"""`arl reproduce problem|exercise all --quick --seeds 1` once, and one seed's record read back."""

import json
from pathlib import Path

from arl.cli.main import main


def reproduce_all(out: Path, kind: str) -> Path:
    """Run every `kind` ("problem" or "exercise") in --quick form on seed 0 into `out`."""
    argv = ["reproduce", kind, "all", "--quick", "--seed", "0", "--seeds", "1", "--out", str(out)]
    assert main(argv) == 0
    return out


def seed0(out: Path, kind: str, n: int) -> dict:
    """Seed 0's record of `kind` N, after checking its results.json and figure."""
    r = json.loads((out / f"{kind}-{n}" / "results.json").read_text())
    assert r[kind] == n and r["seeds"] == [0] and isinstance(r["shown"], bool)
    assert ({"problem", "exercise"} - {kind}).isdisjoint(r)  # labelled as one kind only
    assert (out / f"{kind}-{n}" / f"{kind}-{n}.png").stat().st_size > 1000
    return r["per_seed"][0]
