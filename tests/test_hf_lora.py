"""LoRA on a real model (issue 45; arl.hf.lora, through peft): only the adapters train, the
base is never written, a saved adapter reloads to the same log-probs, the reference with the
adapters off is the base, and every bad --lora-* input is one line, exit 2."""

import hashlib
import json
import math
import shutil
import sys

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("peft")

from arl.batch import collate  # noqa: E402
from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.hf.lora import AdapterOff, add_lora, is_lora, merge_adapter  # noqa: E402
from arl.hf.policy import CHAT_FILE, load_hf  # noqa: E402
from arl.hf.tiny import build_tiny  # noqa: E402
from arl.losses import token_logprobs  # noqa: E402
from arl.rollout import scripted_rollout  # noqa: E402
from arl.train.checkpoint.files import save_policy  # noqa: E402
from arl.train.common import make_optimizer, reference_of  # noqa: E402

HIDDEN, KV = 64, 32  # build_tiny: hidden 64; 2 of 4 heads for keys and values: 2 * 16
ATTENTION = {"q_proj": (HIDDEN, HIDDEN), "k_proj": (HIDDEN, KV), "v_proj": (HIDDEN, KV)}
ATTENTION["o_proj"] = (HIDDEN, HIDDEN)
MLP = {"gate_proj": (HIDDEN, 128), "up_proj": (HIDDEN, 128), "down_proj": (128, HIDDEN)}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("base"), arch="qwen2", layers=2)


def _demos(policy, n=8):
    return [scripted_rollout("oracle", t, renderer=policy.renderer) for t in tasks_for("train")[:n]]


def _lora_names(model) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize(
    "targets, shapes",
    [(None, ATTENTION), ("q_proj,v_proj", {k: ATTENTION[k] for k in ("q_proj", "v_proj")})]
    + [("all-linear", ATTENTION | MLP)],
)
def test_only_the_adapters_train(base_dir, targets, shapes):
    policy = load_hf(str(base_dir))
    total = policy.num_params()
    add_lora(policy, 4, targets=targets or ("q_proj", "k_proj", "v_proj", "o_proj"))
    layers, r = 2, 4
    want = layers * sum(r * (i + o) for i, o in shapes.values())  # A: r x in, B: out x r
    names = _lora_names(policy)
    assert sum(p.numel() for p in policy.parameters() if p.requires_grad) == want
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in names} == set(shapes)
    assert policy.num_params() == total + want  # the base's weights are all still there
    opt = make_optimizer(policy, 1e-3)  # the optimizer holds the adapters only
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == want


@pytest.fixture(scope="module")
def trained(base_dir):
    """A rank-4 adapter after 3 steps of oracle SFT (lr 1e-2), and the base's parameters."""
    from arl.train.sft import SFTConfig, sft_train

    policy = load_hf(str(base_dir))
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    add_lora(policy, 4)
    init = {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}
    sft_train(policy, _demos(policy), SFTConfig(steps=3, batch_size=4, lr=1e-2), hook_every=0)
    return policy, before, init


def test_training_moves_the_adapters_and_leaves_the_base(trained):
    policy, before, init = trained
    base = policy.model.get_base_model()
    for name, p in base.named_parameters():
        if ".lora_" not in name:  # peft keeps a wrapped Linear's weights under base_layer
            assert torch.equal(p, before[name.replace(".base_layer", "")]), name
    moved = {
        n for n, p in policy.named_parameters() if p.requires_grad and not torch.equal(p, init[n])
    }
    assert moved == set(init)  # every A and B matrix moved (B from its zero start)


def test_the_saved_adapter_reloads_to_the_same_logprobs(trained, tmp_path):
    policy, _, _ = trained
    policy.eval()
    batch = collate(_demos(policy, 4))
    with torch.no_grad():
        want = token_logprobs(policy, batch)
    saved = save_policy(policy, tmp_path / "final", extra={"kind": "sft"})
    files = {p.name for p in saved.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", CHAT_FILE, "arl.json"} <= files
    assert "tokenizer.json" in files and "model.safetensors" not in files  # no base copy
    config = json.loads((saved / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8  # alpha 2R by default
    back = load_hf(str(saved))
    assert is_lora(back) and _lora_names(back) == _lora_names(policy)  # trains on if asked
    with torch.no_grad():
        got = token_logprobs(back, batch)
    assert torch.allclose(got, want, atol=1e-6), float((got - want).abs().max())
    merged = load_hf(str(merge_adapter(saved, tmp_path / "merged")))  # peft's merge_and_unload
    assert not is_lora(merged) and (tmp_path / "merged" / "model.safetensors").is_file()
    with torch.no_grad():
        got = token_logprobs(merged, batch)
    assert torch.allclose(got, want, atol=1e-5), float((got - want).abs().max())


def test_the_reference_with_the_adapters_off_is_the_base(trained, base_dir):
    policy, _, _ = trained
    batch = collate(_demos(policy, 4))
    ref = reference_of(policy)
    assert isinstance(ref, AdapterOff) and ref.state_dict() == {}  # no second copy
    policy.train()
    with torch.no_grad():
        off = token_logprobs(ref, batch)
        base = token_logprobs(load_hf(str(base_dir)).eval(), batch)
    assert torch.allclose(off, base, atol=1e-6), float((off - base).abs().max())
    assert policy.training  # its mode is given back, and its adapters are on again
    policy.eval()
    with torch.no_grad():
        on = token_logprobs(policy, batch)
    assert float((on - base).abs().max()) > 1e-3  # the trained adapter changes the policy


def test_dpo_against_the_adapters_off_starts_at_ln2(base_dir):
    from arl.train.dpo import DPOConfig, dpo_train

    policy = add_lora(load_hf(str(base_dir)), 4)
    blind = [scripted_rollout("blind", t, renderer=policy.renderer) for t in tasks_for("train")]
    pairs = list(zip(_demos(policy, 4), blind[:4], strict=True))
    hist = dpo_train(policy, reference_of(policy), pairs, DPOConfig(steps=1, lr=1e-2))
    assert abs(hist[0]["chosen_delta"]) < 1e-5 and abs(hist[0]["rejected_delta"]) < 1e-5
    assert hist[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)  # policy = reference
    assert hist[-1]["chosen_delta"] > hist[-1]["rejected_delta"]


def _sha(folder) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_train_sft_with_lora_from_the_command_line(base_dir, tmp_path, cli):
    from safetensors.torch import load_file

    before = _sha(base_dir)
    out = tmp_path / "sft"
    argv = ["train", "sft", "--model", str(base_dir), "--lora-rank", "4", "--steps", "2"]
    code, stdout, err = cli(*argv, "--batch-size", "2", "--eval-samples", "1", "--out", str(out))
    assert code == 0, err
    assert "(LoRA rank 4: 3,584 trainable)" in stdout  # 2 layers x 4 x (128 + 96 + 96 + 128)
    assert _sha(base_dir) == before  # the base folder is never written
    final = out / "final"
    weights = load_file(final / "adapter_model.safetensors")
    assert weights and all(".lora_A." in k or ".lora_B." in k for k in weights)
    assert sum(t.numel() for t in weights.values()) == 3584
    assert all(v.abs().max() > 0 for k, v in weights.items() if ".lora_B." in k)  # B left 0
    assert json.loads((final / "arl.json").read_text())["kind"] == "sft"
    code, stdout, err = cli("eval", "--model", str(final), "--split", "heldout", "--samples", "1")
    assert code == 0, err


def _one_line(code, err) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("arl: error:") and "Traceback" not in err


BAD = [
    (["--lora-rank", "-1"], "expected an integer >= 0"),
    (["--lora-rank", "2.5"], "expected an integer >= 0"),
    (["--lora-rank", "4", "--lora-alpha", "nan"], "--lora-alpha"),
    (["--lora-rank", "4", "--lora-alpha", "inf"], "--lora-alpha"),
    (["--lora-rank", "4", "--lora-alpha", "0"], "--lora-alpha"),
    (["--lora-rank", "4", "--lora-alpha", "-8"], "--lora-alpha"),
    (["--lora-alpha", "8"], "--lora-alpha goes with --lora-rank"),
    (["--lora-targets", "q_proj"], "--lora-targets goes with --lora-rank"),
    (["--lora-rank", "4", "--lora-targets", ","], "name at least one module"),
    (
        ["--lora-rank", "4", "--lora-targets", "q_proj,qkv_proj"],
        "no Linear module named 'qkv_proj'",
    ),
]


@pytest.mark.parametrize("flags, message", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_bad_lora_flags_are_one_line(base_dir, tmp_path, cli, flags, message):
    argv = ["train", "sft", "--model", str(base_dir), *flags, "--out", str(tmp_path / "r")]
    code, _, err = cli(*argv, "--quiet")
    _one_line(code, err)
    assert message in err


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "sft", "--lora-rank", "4"],
        ["train", "dpo", "--init", "weak", "--lora-rank", "4"],
        ["train", "pg", "--lora-rank", "4", "--set", "out=OUT"],
        ["train", "distill", "--teacher", "weak", "--lora-rank", "4", "--set", "out=OUT"],
    ],
    ids=["sft", "dpo-init", "pg", "distill"],
)
def test_lora_without_a_model_is_one_line(tmp_path, cli, argv):
    code, _, err = cli(*[a.replace("OUT", str(tmp_path / "r")) for a in argv])
    _one_line(code, err)
    assert "--lora-rank goes with --model" in err


def test_missing_peft_names_the_extra(base_dir, tmp_path, cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft raises ImportError
    argv = ["train", "pg", "--model", str(base_dir), "--lora-rank", "4"]
    code, _, err = cli(*argv, "--set", f"out={tmp_path / 'r'}")
    _one_line(code, err)
    assert "pip install 'arl[hf]'" in err and "peft" in err


def test_an_adapter_folder_is_refused_where_it_cannot_serve(trained, tmp_path, cli):
    policy, _, _ = trained
    saved = save_policy(policy, tmp_path / "adapter")
    argv = ["train", "sft", "--model", str(saved), "--lora-rank", "4"]
    code, _, err = cli(*argv, "--out", str(tmp_path / "r"))  # a second adapter on top
    _one_line(code, err)
    assert "is a LoRA adapter already" in err
    moved = tmp_path / "moved"
    shutil.copytree(saved, moved)
    config = json.loads((moved / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "no-such-base")
    (moved / "adapter_config.json").write_text(json.dumps(config))
    code, _, err = cli("eval", "--model", str(moved), "--samples", "1")
    _one_line(code, err)
    assert "its base model" in err and "no-such-base" in err


def test_train_pg_with_lora_keeps_no_second_copy_for_its_kl(base_dir, tmp_path, cli):
    from arl.train.checkpoint import STATE_FILE

    out = tmp_path / "pg"
    argv = ["train", "pg", "--model", str(base_dir), "--lora-rank", "2", "--quiet"]
    sets = ["steps=1", "kl=k3", "tasks_per_step=2", "group_size=2", f"out={out}"]
    code, stdout, err = cli(*argv, *[a for s in sets for a in ("--set", s)])
    assert code == 0, err
    assert "(LoRA rank 2: 1,792 trainable)" in stdout  # 2 layers x 2 x 448
    ckpt = out / "ckpt-000001"
    assert (ckpt / "adapter_model.safetensors").is_file() and not (
        ckpt / "model.safetensors"
    ).exists()
    state = torch.load(ckpt / STATE_FILE, weights_only=True)
    assert state["reference"] == {}  # the reference is the base with the adapters off
    step = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][-1]
    assert step["kl/ref_k3"] == pytest.approx(0.0, abs=1e-6)  # a fresh adapter: policy = base
