"""Export both ways: TinyAgent as a transformers GPT-2 (same logits), rollouts as Parquet."""

import pytest
import torch

from arl.model import TinyAgent, TinyAgentConfig
from arl.train.checkpoint import save_checkpoint
from arl.types import POLICY


@pytest.fixture()
def transformers():
    """The hf extra (transformers and tokenizers), or the test is skipped."""
    pytest.importorskip("tokenizers")
    return pytest.importorskip("transformers")


def _random_agent(vocab, bias: bool = True, seed: int = 0) -> TinyAgent:
    """A TinyAgent with every weight (biases, LayerNorms) far from its init, so a wrong
    mapping of any one tensor shows in the logits."""
    torch.manual_seed(seed)
    cfg = TinyAgentConfig(
        vocab_size=len(vocab), block_size=48, n_layer=2, n_embd=32, n_head=4, bias=bias
    )
    model = TinyAgent(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def _max_diff(model: TinyAgent, hf, ids: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(ids)[0] - hf(ids).logits).abs().max())


@pytest.fixture()
def exported(tmp_path, vocab, cli, transformers):
    """A random checkpoint saved under tmp_path, exported with `arl export hf`."""
    model = _random_agent(vocab)
    save_checkpoint(model, tmp_path / "ckpt")
    code, out, err = cli("export", "hf", str(tmp_path / "ckpt"), str(tmp_path / "hf"))
    assert code == 0, err
    return model, tmp_path / "hf"


def test_hf_logits_equal_tinyagent(exported, vocab, transformers):
    model, path = exported
    hf = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    assert type(hf).__name__ == "GPT2LMHeadModel"
    torch.manual_seed(1)
    ids = torch.randint(0, len(vocab), (3, model.config.block_size))  # every position
    assert _max_diff(model, hf, ids) < 1e-4
    assert torch.equal(hf.lm_head.weight, hf.transformer.wte.weight)  # tied, as in TinyAgent


def test_hf_generate_continues_as_tinyagent_greedy(exported, vocab, transformers):
    model, path = exported
    hf = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    prompt = torch.tensor([vocab.encode(["<bos>", "fix", "handle", "_", "entries"])])
    ids = prompt
    with torch.no_grad():
        for _ in range(8):  # TinyAgent's greedy decode, by hand
            ids = torch.cat([ids, model(ids)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    got = hf.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=8,
        min_new_tokens=8,
        do_sample=False,
    )
    assert got.tolist() == ids.tolist()


def test_hf_export_without_biases(tmp_path, vocab, transformers):
    from arl.export import export_hf

    model = _random_agent(vocab, bias=False, seed=2)
    export_hf(model, tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, len(vocab), (2, 20))
    assert _max_diff(model, hf, ids) < 1e-4


def test_the_equality_test_can_fail(exported, vocab, transformers):
    """Each detail of the mapping matters beyond the 1e-4 tolerance: an untransposed square
    weight, and GPT-2's default tanh GELU instead of TinyAgent's exact one."""
    model, path = exported
    ids = torch.randint(0, len(vocab), (2, 30))
    hf = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        w = hf.transformer.h[1].attn.c_proj.weight
        w.copy_(w.t().clone())
    assert _max_diff(model, hf, ids) > 1e-3
    tanh = transformers.AutoModelForCausalLM.from_pretrained(path, activation_function="gelu_new")
    assert _max_diff(model, tanh.eval(), ids) > 1e-4


def test_tokenizer_ids_are_arl_vocabulary_ids(exported, vocab, transformers):
    _, path = exported
    tok = transformers.AutoTokenizer.from_pretrained(path)
    assert isinstance(tok, transformers.PreTrainedTokenizerFast)
    config = transformers.AutoConfig.from_pretrained(path)
    assert len(tok) == len(vocab)
    assert tok.convert_tokens_to_ids(list(vocab.words)) == list(range(len(vocab)))
    text = "<bos> fix handle _ entries read <end> <obs> def handle _ entries ( xs ) : </obs>"
    assert tok(text).input_ids == vocab.encode(text.split())
    assert tok.decode(vocab.encode(text.split())) == text
    assert (
        (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
        == (
            config.bos_token_id,
            config.eos_token_id,
            config.pad_token_id,
        )
        == (vocab.id("<bos>"), vocab.id("<end>"), vocab.id("<pad>"))
    )
    assert tok("zebra").input_ids == [vocab.id("<unk>")]


def test_export_hf_refuses_bad_input(tmp_path, vocab, cli, transformers):
    code, _, err = cli("export", "hf", str(tmp_path / "nothing"), str(tmp_path / "hf"))
    assert code == 2 and "no such checkpoint" in err
    run = tmp_path / "run"
    save_checkpoint(_random_agent(vocab), run / "ckpt-000004")
    code, _, err = cli("export", "hf", str(run), str(tmp_path / "hf"))
    assert code == 2 and "ckpt-000004" in err and len(err.splitlines()) == 1
    assert cli("export", "hf", str(run / "ckpt-000004"), str(tmp_path / "hf"))[0] == 0
    code, _, err = cli("export", "hf", str(run / "ckpt-000004"), str(tmp_path / "hf"))
    assert code == 2 and "--overwrite" in err
    assert (
        cli("export", "hf", str(run / "ckpt-000004"), str(tmp_path / "hf"), "--overwrite")[0] == 0
    )


# --- trajectories ------------------------------------------------------------------------------


def test_trajectories_round_trip_through_datasets(tmp_path, cli, tiny_model):
    datasets = pytest.importorskip("datasets")
    from arl.eval.metrics import run_policy
    from arl.gym.tasks import tasks_for

    ckpt = save_checkpoint(tiny_model, tmp_path / "ckpt")
    out = tmp_path / "t.parquet"
    code, stdout, err = cli(
        "export",
        "trajectories",
        str(out),
        "--policy",
        str(ckpt),
        "--split",
        "heldout",
        "--samples",
        "2",
        "--seed",
        "3",
    )
    assert code == 0, err
    ds = datasets.load_dataset("parquet", data_files=str(out), split="train")
    trajs = run_policy(tiny_model, tasks_for("heldout"), samples=2, seed=3)
    assert len(ds) == len(trajs) == 20
    for k, (row, tr) in enumerate(zip(ds, trajs, strict=True)):
        assert (row["task"], row["group"], row["sample"]) == (tr.task, k // 2, k % 2)
        assert row["input_ids"] == list(tr.ids_T)
        assert row["owners"] == list(tr.owners_T)
        assert row["loss_mask"] == [int(o == POLICY) for o in row["owners"]]  # token by token
        assert row["sampler_logprobs"] == list(tr.logprobs_T)  # float32 holds them exactly
        assert any(row["sampler_logprobs"])  # a model policy: real log-probs
        assert (row["reward"], row["passed"], row["split"]) == (tr.reward, tr.passed, "heldout")
    trl = ds.select_columns(["input_ids", "loss_mask"]).rename_column(
        "loss_mask", "completion_mask"
    )
    assert trl.column_names == ["input_ids", "completion_mask"]  # TRL's pre-tokenized SFT rows
    assert ds[0]["prompt"][0]["role"] == "user" and ds[0]["reward_model"]["style"] == "rule"


def test_trajectories_into_a_directory_and_refusals(tmp_path, cli):
    datasets = pytest.importorskip("datasets")
    code, _, err = cli(
        "export",
        "trajectories",
        str(tmp_path / "d"),
        "--policy",
        "oracle",
        "--samples",
        "1",
        "--split",
        "heldout",
    )
    assert code == 0, err
    ds = datasets.Dataset.from_parquet(str(tmp_path / "d" / "heldout.parquet"))
    assert (
        len(ds) == 10
        and all(ds["passed"])
        and set(ds["family"]) == {"init", "range", "compare", "minmax", "div"}
    )
    code, _, err = cli("export", "trajectories", str(tmp_path / "d"), "--policy", "oracle")
    assert code == 0  # another split: another file
    code, _, err = cli(
        "export", "trajectories", str(tmp_path / "d"), "--policy", "oracle", "--split", "heldout"
    )
    assert code == 2 and "--overwrite" in err
    code, _, err = cli("export", "trajectories", str(tmp_path / "x.parquet"), "--policy", "nope")
    assert code == 2 and "unknown policy" in err
