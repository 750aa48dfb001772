"""The docs' Python runs: every ```python block in README.md and docs/*.md is executed on CPU.

A block runs as a user would paste it: in a fresh namespace, in an empty working folder, with
no network (tiny models built here by arl.hf.tiny.build_tiny or random TinyAgents, never a
hub model). What a block may lean on is said in the markdown, in an HTML comment on the
last non-blank line before its fence:

- `<!-- docs-test: setup NAME -->`: SETUPS[NAME] below first makes what the page says comes
  before the block (`PATH`, the model folder a block names; a table an `arl export` command
  on the page writes), and says which trainers the block must train;
- `<!-- docs-test: skip REASON -->`: not run, for a block that needs a GPU, a cluster or a
  hub model; the reason is required.

A block without a marker runs as it is, so a new block that cannot run on CPU fails here
until it is made to run or is marked. A marker on no python block, an unknown setup or a
skip without a reason fails too.

Every TRL config a block builds is cut to one optimizer step (max_steps=1; nothing saved or
reported; GRPO completions of at most 32 tokens); its other arguments are the block's, so a
config that asks for bf16 on a machine without a GPU fails as a user's would. A block that
imports trl is `slow`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_docs import FENCE, PAGES, ROOT

MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->\s*$")
PYTHON_BLOCKS = {"python", "py", "python3"}


@dataclass(frozen=True)
class Block:
    """One fenced python block: where it is, its code, and its marker's (kind, argument)."""

    where: str  # PAGE:LINE of the opening fence
    code: str
    kind: str  # "run" (no marker), "setup" or "skip"
    arg: str  # the setup's name or the skip's reason


def python_blocks(text: str, name: str) -> list[Block]:
    """The page's python blocks with their markers; a marker that is not one of the two
    kinds, or does not stand right before a python block, raises ValueError naming its line."""
    lines = text.splitlines()
    blocks, used, fence, start, marker, info = [], set(), None, 0, None, ""
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence, start, info = m.group(2), n, m.group(3).lower()
            marker = marker_before(lines, n, name)
            if marker and info not in PYTHON_BLOCKS:
                raise ValueError(f"{name}:{n}: a docs-test marker on a ```{info} block")
            used |= {marker[2]} if marker else set()
        elif fence is not None and line.strip().startswith(fence) and not line.strip(fence[0]):
            if info in PYTHON_BLOCKS:
                kind, arg = marker[:2] if marker else ("run", "")
                blocks.append(Block(f"{name}:{start}", "\n".join(lines[start : n - 1]), kind, arg))
            fence = None
    stray = [n for n, line in enumerate(lines, 1) if MARKER.match(line) and n not in used]
    if stray:
        raise ValueError(f"{name}:{stray[0]}: a docs-test marker before no python block")
    return blocks


def marker_before(lines: list[str], fence_line: int, name: str) -> tuple[str, str, int] | None:
    """(kind, argument, its line) of the marker on the last non-blank line before the fence."""
    k = fence_line - 2
    while k >= 0 and not lines[k].strip():
        k -= 1
    m = MARKER.match(lines[k]) if k >= 0 else None
    if m is None:
        return None
    kind, arg = m.group(1), m.group(2)
    if kind not in ("setup", "skip") or not arg:
        raise ValueError(f"{name}:{k + 1}: want `docs-test: setup NAME` or `skip REASON`")
    return kind, arg, k + 1


# --- what a block may lean on ------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """Makes a block's inputs in the working folder; returns the names it defines."""

    make: Callable[[Path, pytest.FixtureRequest], dict]
    trains: tuple[str, ...] = ()  # the trainers the block trains, one step each, in order


def tiny_qwen(folder: Path, request) -> dict:
    """PATH: a tiny Qwen2 with Qwen2.5's published template (a hub id's stand-in)."""
    from arl.hf.tiny import build_tiny

    return {"PATH": str(build_tiny(folder / "model", arch="qwen2", style="qwen2.5"))}


def tinyagent_hf(folder: Path, request) -> str:
    """A random TinyAgent checkpoint, exported with `arl export hf` (the page's PATH)."""
    from arl.train.checkpoint import save_checkpoint

    cli = request.getfixturevalue("cli")
    ckpt = save_checkpoint(request.getfixturevalue("tiny_model"), folder / "ckpt")
    code, _, err = cli("export", "hf", str(ckpt), str(folder / "hf"), "--env", "bugfix")
    assert code == 0, err
    return str(folder / "hf")


def tinyagent_table(folder: Path, request) -> dict:
    """PATH and the page's `arl export trajectories rollouts.parquet --policy oracle`."""
    path = tinyagent_hf(folder, request)
    cli = request.getfixturevalue("cli")
    code, _, err = cli("export", "trajectories", "rollouts.parquet", "--policy", "oracle")
    assert code == 0, err
    return {"PATH": path}


def tinyagent_pairs(folder: Path, request) -> dict:
    """PATH and the page's `arl export pairs runs/pairs` (of `blind`, a scripted policy that
    both passes and fails: the page's `weak` needs a trained base)."""
    path = tinyagent_hf(folder, request)
    cli = request.getfixturevalue("cli")
    code, _, err = cli("export", "pairs", "runs/pairs", "--policy", "blind", "--seed", "1")
    assert code == 0, err
    return {"PATH": path}


def tiny_lora(folder: Path, request) -> dict:
    """The page's `arl train sft --model ... --lora-rank 16 --out runs/sft-lora` on a tiny
    Qwen2 (one step): an adapter folder in runs/sft-lora/final."""
    pytest.importorskip("peft", reason="peft is not installed (pip install 'arl[hf]')")
    from arl.hf.tiny import build_tiny

    path = str(build_tiny(folder / "model", arch="qwen2", layers=1))
    cli = request.getfixturevalue("cli")
    argv = ["--lora-rank", "16", "--steps", "1", "--batch-size", "2", "--eval-samples", "1"]
    code, _, err = cli("train", "sft", "--model", path, *argv, "--out", "runs/sft-lora")
    assert code == 0, err
    return {}


SETUPS = {
    "tiny-lora": Setup(tiny_lora),
    "tiny-qwen": Setup(tiny_qwen, ("GRPOTrainer",)),
    "tinyagent-table": Setup(tinyagent_table, ("SFTTrainer",)),
    "tinyagent-pairs": Setup(tinyagent_pairs, ("DPOTrainer",)),
}
EXTRAS = {"gymnasium", "datasets", "pyarrow", "pandas", "transformers", "trl", "tokenizers"}
EXTRAS |= {"peft"}
ONE_STEP = dict(
    max_steps=1, report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True
)


def one_step_configs(monkeypatch) -> None:
    """Cut every TRL config a block builds to one optimizer step (GRPO: 32-token turns)."""
    import trl

    for name in ("GRPOConfig", "SFTConfig", "DPOConfig"):
        cls = getattr(trl, name)

        def make(*args, _cls=cls, **kw):
            kw.update(ONE_STEP)
            if _cls.__name__ == "GRPOConfig":
                kw["max_completion_length"] = min(kw.get("max_completion_length") or 32, 32)
            return _cls(*args, **kw)

        monkeypatch.setattr(trl, name, make)


def record_training(monkeypatch) -> list[tuple[str, int]]:
    """(trainer class, optimizer steps) of every transformers Trainer a block trains."""
    import transformers

    trained, train = [], transformers.Trainer.train

    def recorded(self, *args, **kw):
        out = train(self, *args, **kw)
        trained.append((type(self).__name__, self.state.global_step))
        return out

    monkeypatch.setattr(transformers.Trainer, "train", recorded)
    return trained


# --- the blocks --------------------------------------------------------------------------------

BLOCKS = [b for p in PAGES for b in python_blocks(p.read_text(), str(p.relative_to(ROOT)))]


def as_param(block: Block):
    slow = re.search(r"^\s*(from|import) trl\b", block.code, re.M) is not None
    return pytest.param(block, id=block.where, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("block", [as_param(b) for b in BLOCKS])
def test_every_python_block_runs(block, tmp_path, monkeypatch, request):
    if block.kind == "skip":
        pytest.skip(f"{block.where}: marked not runnable here: {block.arg}")
    assert block.kind == "run" or block.arg in SETUPS, f"{block.where}: no setup {block.arg!r}"
    setup = SETUPS.get(block.arg, Setup(lambda *_: {}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub id in a block fails, never downloads
    if "huggingface_hub.constants" in sys.modules:  # read once, at import
        monkeypatch.setattr(sys.modules["huggingface_hub.constants"], "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    names = {"__name__": "__main__", **setup.make(tmp_path, request)}
    trained = []
    if "trl" in block.code or "transformers" in block.code:
        pytest.importorskip("trl", reason="trl is not installed (pip install 'arl[trl]')")
        one_step_configs(monkeypatch)
        trained = record_training(monkeypatch)
    try:
        exec(compile(block.code, block.where, "exec"), names)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in EXTRAS:
            pytest.skip(f"{block.where}: {e.name} is not installed")
        raise
    assert [t for t, _ in trained] == list(setup.trains), f"{block.where}: trained {trained}"
    assert all(steps == 1 for _, steps in trained), f"{block.where}: trained {trained}"


def test_the_blocks_are_found():
    """The extractor finds the pages' blocks (a broken one would pass by finding none)."""
    where = {b.where.split(":")[0] for b in BLOCKS}
    assert {"docs/real-models.md", "docs/codefix.md"} <= where
    assert len(BLOCKS) >= 6, [b.where for b in BLOCKS]
    assert sorted(b.arg for b in BLOCKS if b.kind == "setup") == sorted(SETUPS)


def test_markers_are_read_and_checked():
    page = (
        "```python\nx = 1\n```\n"
        "<!-- docs-test: skip needs a GPU -->\n\n```python\ncuda()\n```\n"
        "<!-- docs-test: setup tiny-qwen -->\n```py\nPATH\n```\n"
        "```bash\npython -c 1\n```\n"
    )
    assert python_blocks(page, "p.md") == [
        Block("p.md:1", "x = 1", "run", ""),
        Block("p.md:6", "cuda()", "skip", "needs a GPU"),
        Block("p.md:10", "PATH", "setup", "tiny-qwen"),
    ]
    for bad, why in [
        ("<!-- docs-test: skip -->\n```python\nx\n```\n", "want"),  # a skip needs its reason
        ("<!-- docs-test: later x -->\n```python\nx\n```\n", "want"),
        ("<!-- docs-test: skip GPU -->\n```bash\nx\n```\n", "```bash"),
        ("<!-- docs-test: skip GPU -->\ntext\n```python\nx\n```\n", "before no python block"),
    ]:
        with pytest.raises(ValueError, match=re.escape(why)):
            python_blocks(bad, "p.md")


def test_an_unmarked_block_that_cannot_run_fails(tmp_path, monkeypatch, request):
    """A block that needs what CPU tests lack is run, and fails: it is not passed over."""
    for code in ("import vllm_on_a_gpu", "AutoModel.from_pretrained('meta-llama/Llama-3.1-8B')"):
        with pytest.raises((ModuleNotFoundError, NameError)):
            test_every_python_block_runs(
                Block("p.md:1", code, "run", ""), tmp_path, monkeypatch, request
            )
