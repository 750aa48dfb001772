"""Export both ways: TinyAgent as a transformers GPT-2 (same logits), rollouts as Parquet."""

import pytest
import torch

from arl.model import TinyAgent, TinyAgentConfig
from arl.train.checkpoint import save_checkpoint
from arl.types import POLICY

BUGFIX = ("--env", "bugfix")  # a checkpoint saved here records no environment


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
    code, out, err = cli(
        "export", "hf", str(tmp_path / "ckpt"), str(tmp_path / "hf"), "--env", "bugfix"
    )
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
    assert (
        cli("export", "hf", str(run / "ckpt-000004"), str(tmp_path / "hf"), "--env", "bugfix")[0]
        == 0
    )
    code, _, err = cli("export", "hf", str(run / "ckpt-000004"), str(tmp_path / "hf"))
    assert code == 2 and "--overwrite" in err
    assert (
        cli("export", "hf", str(run / "ckpt-000004"), str(tmp_path / "hf"), "--overwrite", *BUGFIX)[
            0
        ]
        == 0
    )


# --- trajectories ------------------------------------------------------------------------------


def test_trajectories_round_trip_through_datasets(tmp_path, cli, tiny_model):
    datasets = pytest.importorskip("datasets")
    from arl.bugfix.tasks import tasks_for
    from arl.eval.metrics import run_policy

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


def test_trajectories_refusals_of_who_plays(tmp_path, cli, vocab):
    pytest.importorskip("datasets")
    out = str(tmp_path / "x.parquet")
    code, _, err = cli("export", "trajectories", out)
    assert code == 2 and "which policy" in err and len(err.splitlines()) == 1
    code, _, err = cli("export", "trajectories", out, "--policy", "oracle", "--device", "cuda")
    assert code == 2 and "--model's" in err
    ckpt = str(save_checkpoint(_random_agent(vocab), tmp_path / "ckpt"))
    code, _, err = cli("export", "trajectories", out, "--policy", ckpt, "--model", "anything")
    assert code == 2 and "only a scripted policy" in err and len(err.splitlines()) == 1
    code, _, err = cli("export", "pairs", out, "--policy", "oracle", "--samples", "2")
    assert code == 2 and "no task had both" in err  # the oracle never fails: nothing to pair
    assert not (tmp_path / "x.parquet").exists()


# --- exported model folders: what a user loads, with the umask's modes ------------------------


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_export_hf_folder_holds_only_what_from_pretrained_loads(tmp_path, vocab, cli, transformers):
    save_checkpoint(_random_agent(vocab), tmp_path / "ckpt")
    out = tmp_path / "hf"
    out.mkdir()
    (out / ".arl-lock").write_text("123")  # an earlier arl's export left its lock and marker
    (out / ".arl-run.json").write_text('{"kind": "export hf"}')
    (out / "special_tokens_map.json").write_text("{}")  # and a file this export does not write
    code, _, err = cli("export", "hf", str(tmp_path / "ckpt"), str(out), "--overwrite", *BUGFIX)
    assert code == 0, err
    names = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
    assert {p.name for p in out.iterdir()} == names
    for p in out.iterdir():
        assert p.stat().st_mode & 0o777 == 0o666 & ~_umask(), p.name
    (out / "notes.txt").write_text("mine")
    code, _, err = cli("export", "hf", str(tmp_path / "ckpt"), str(out), "--overwrite", *BUGFIX)
    assert code == 2 and "notes.txt" in err and len(err.splitlines()) == 1
    assert (out / "notes.txt").read_text() == "mine"


# --- a real model's rollouts and pairs, and TRL's trainers on them ----------------------------


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random Qwen2-style model and its ChatML tokenizer (arl.hf.tiny, offline)."""
    pytest.importorskip("transformers")
    from arl.hf.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny"), arch="qwen2")


def test_real_model_folders_get_the_umasks_modes(tmp_path, tiny_dir):
    from arl.hf.policy import load_hf
    from arl.train.checkpoint import save_policy

    out = save_policy(load_hf(str(tiny_dir)), tmp_path / "final", extra={"kind": "sft"})
    assert (out / "model.safetensors").is_file()
    for p in out.iterdir():  # transformers writes model.safetensors 0600 by itself
        assert p.stat().st_mode & 0o777 == 0o666 & ~_umask(), p.name


@pytest.fixture(scope="module")
def sampled(tiny_dir, tmp_path_factory):
    """`arl export trajectories --model`: the tiny model's own rollouts on the held-out split."""
    from arl.cli.main import main

    out = tmp_path_factory.mktemp("sampled") / "t.parquet"
    argv = ["export", "trajectories", str(out), "--model", str(tiny_dir), "--split", "heldout"]
    assert main([*argv, "--samples", "1", "--seed", "4"]) == 0
    return out


def _trl_args(cls, out, batch: int, **kw):
    """One optimizer step of a TRL trainer on the CPU, logged, nothing saved."""
    return cls(
        output_dir=str(out),
        max_steps=1,
        per_device_train_batch_size=batch,
        learning_rate=1e-3,
        report_to="none",
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        **kw,
    )


def test_model_trajectories_are_in_its_tokens_with_its_sampler_logprobs(sampled, tiny_dir):
    datasets = pytest.importorskip("datasets")
    from arl.bugfix.environment import BUGFIX
    from arl.bugfix.tasks import tasks_for
    from arl.export import trajectory_features
    from arl.hf.policy import load_hf

    policy = load_hf(str(tiny_dir))
    chat = policy.renderer
    ds = datasets.Dataset.from_parquet(str(sampled))
    assert len(ds) == 10 and ds.column_names == list(trajectory_features())  # TinyAgent's columns
    limit = chat.for_environment(BUGFIX).max_call_tokens
    for row, task in zip(ds, tasks_for("heldout"), strict=True):
        issue = f"fix {task.name}"
        assert row["prompt"] == chat.messages(issue)  # the chat the model read, not arl's words
        ids, owners = row["input_ids"], row["owners"]
        head, _ = chat.render_prompt(issue)
        assert ids[: len(head)] == head and owners[len(head)] == POLICY
        assert row["loss_mask"] == [int(o == POLICY) for o in owners]
        with torch.no_grad():  # the sampler's log-probs are the model's (temperature 1)
            logp = torch.log_softmax(policy(torch.tensor([ids]))[0][0, :-1], -1)
        mine = logp.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
        mask = torch.tensor(row["loss_mask"][1:]).bool()
        got = torch.tensor(row["sampler_logprobs"][1:])
        assert (got[~mask] == 0).all() and (got[mask] < 0).all()
        assert (got[mask] - mine[mask]).abs().max() < 1e-4
        runs = _runs(owners, POLICY)  # the calls: each ended by the model, or cut at the limit
        assert runs and all(b - a == limit or ids[b - 1] == chat.end_id for a, b in runs)
        assert all(b - a <= limit for a, b in runs) and len(runs) == row["turns"]


def _runs(owners, owner) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of `owner` in `owners`."""
    runs, start = [], None
    for i, o in enumerate([*owners, None]):
        if o == owner and start is None:
            start = i
        elif o != owner and start is not None:
            runs.append((start, i))
            start = None
    return runs


def test_model_trajectories_train_in_trl_sft_with_arls_loss(sampled, tiny_dir, tmp_path):
    """TRL 1.16's SFTTrainer on the table, the `assistant_masks` route: its first step's loss is
    arl's masked token-mean NLL of the same episodes."""
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from arl.batch import collate
    from arl.hf.policy import load_hf
    from arl.losses import sft_loss, token_logprobs
    from arl.types import Trajectory

    rows = datasets.Dataset.from_parquet(str(sampled)).select(range(3))
    ds = rows.select_columns(["input_ids", "loss_mask"]).rename_column(
        "loss_mask", "assistant_masks"
    )
    tok = transformers_tokenizer(tiny_dir)
    trainer = trl.SFTTrainer(
        model=str(tiny_dir),
        args=_trl_args(trl.SFTConfig, tmp_path / "sft", len(ds)),
        train_dataset=ds,
        processing_class=tok,
    )
    trainer.train()
    trl_loss = trainer.state.log_history[0]["loss"]
    trajs = [
        Trajectory(
            "t", tuple(r["input_ids"]), tuple(r["owners"]), tuple(r["sampler_logprobs"]), (), 0.0
        )
        for r in rows
    ]
    batch = collate(trajs)
    with torch.no_grad():
        arl_loss = float(sft_loss(token_logprobs(load_hf(str(tiny_dir)), batch), batch.action_mask))
    assert trl_loss == pytest.approx(arl_loss, rel=1e-5)


def transformers_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def _trajectory(row):
    from arl.types import Trajectory

    ids, owners = tuple(row["input_ids"]), tuple(row["owners"])
    return Trajectory(row["task"], ids, owners, tuple(row["sampler_logprobs"]), (), 0.0)


def test_tinyagent_table_in_trl_sft_routes(tmp_path, cli, tiny_model, transformers):
    """The three ways a pre-tokenized mask reaches TRL 1.16's SFTTrainer: `assistant_masks`
    (default config) and `completion_mask` with completion_only_loss=True give arl's loss on
    the exported GPT-2; `completion_mask` alone is silently ignored (every token trained);
    `assistant_only_loss=True` is refused (the dataset is not conversational)."""
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from arl.batch import collate
    from arl.losses import sft_loss, token_logprobs

    ckpt = save_checkpoint(tiny_model, tmp_path / "ckpt")
    assert cli("export", "hf", str(ckpt), str(tmp_path / "hf"), *BUGFIX)[0] == 0
    table = tmp_path / "t.parquet"
    code, _, err = cli("export", "trajectories", str(table), "--policy", "oracle", "--samples", "1")
    assert code == 0, err  # Chapter 15's SFT data: calls, tool output, template tokens
    rows = datasets.Dataset.from_parquet(str(table)).select(range(4))
    assert all({1, 2, 3} <= set(r["owners"]) for r in rows)
    batch = collate([_trajectory(r) for r in rows])
    with torch.no_grad():
        arl_loss = float(sft_loss(token_logprobs(tiny_model.eval(), batch), batch.action_mask))
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")

    def first_loss(column: str, **kw) -> float:
        ds = rows.select_columns(["input_ids", "loss_mask"]).rename_column("loss_mask", column)
        args = _trl_args(trl.SFTConfig, tmp_path / column, len(ds), **kw)
        trainer = trl.SFTTrainer(
            model=str(tmp_path / "hf"), args=args, train_dataset=ds, processing_class=tok
        )
        trainer.train()
        return trainer.state.log_history[0]["loss"]

    assert first_loss("assistant_masks") == pytest.approx(arl_loss, rel=1e-5)
    assert first_loss("completion_mask", completion_only_loss=True) == pytest.approx(
        arl_loss, rel=1e-5
    )
    assert first_loss("completion_mask") != pytest.approx(arl_loss, rel=1e-3)  # mask ignored
    with pytest.raises(ValueError, match="not conversational"):
        first_loss("assistant_masks", assistant_only_loss=True)


def _dpo_step(trl, model_dir, ds, out):
    """DPOTrainer on the pairs table, one step: (the trainer, its first logged record)."""
    from transformers import AutoTokenizer

    trainer = trl.DPOTrainer(
        model=str(model_dir),
        args=_trl_args(trl.DPOConfig, out, len(ds)),
        train_dataset=ds,
        processing_class=AutoTokenizer.from_pretrained(str(model_dir)),
    )
    trainer.train()
    return trainer, trainer.state.log_history[0]


def _arl_pairs(policy: str, samples: int, seed: int, renderer=None):
    """`arl train dpo`'s pairs of a scripted policy's train-split episodes: (pairs, episodes)."""
    import random

    from arl.bugfix.tasks import tasks_for
    from arl.eval.metrics import graded, run_policy
    from arl.export import scripted_episodes
    from arl.train.dpo import build_pairs

    tasks = tasks_for("train")
    if renderer is None:
        trajs = run_policy(policy, tasks, samples, seed)
    else:
        trajs = scripted_episodes(policy, tasks, samples, seed, None, renderer)
    return build_pairs(graded(trajs), random.Random(seed)), trajs


def _check_pairs(ds, pairs, trajs, samples, decode) -> None:
    """The table holds exactly `pairs`, in order, each as the text of its two episodes."""
    from arl.export import prompt_length

    assert len(ds) == len(pairs) > 0
    for row, (good, bad) in zip(ds, pairs, strict=True):
        kc, kr = (next(k for k, t in enumerate(trajs) if t is tr) for tr in (good, bad))
        assert (row["task"], row["group"]) == (good.task, kc // samples) and bad.task == good.task
        assert (row["chosen_sample"], row["rejected_sample"]) == (kc % samples, kr % samples)
        assert (row["chosen_reward"], row["rejected_reward"]) == (good.reward, bad.reward)
        assert good.passed and not bad.passed and row["exact_tokens"]
        n = prompt_length(good)
        assert row["prompt"] + row["chosen"] == decode(good.ids_T)
        assert row["prompt"] + row["rejected"] == decode(bad.ids_T)
        assert decode(good.ids_T[:n]).rstrip() == row["prompt"].rstrip()


def _check_trl_saw_the_episodes(trainer, pairs, eos_id) -> None:
    """TRL's tokenization of each row is its episodes' ids (plus the EOS TRL appends to a
    completion that lacks one)."""
    from arl.export import prompt_length

    prepared = trainer.train_dataset
    for row, (good, bad) in zip(prepared, pairs, strict=True):
        n = prompt_length(good)
        assert row["prompt_ids"] == list(good.ids_T[:n])
        for ids, tr in ((row["chosen_ids"], good), (row["rejected_ids"], bad)):
            rest = list(tr.ids_T[n:])
            assert ids == rest + ([eos_id] if rest[-1] != eos_id else [])


def test_tinyagent_pairs_in_trl_dpo(tmp_path, cli, tiny_model, vocab, transformers):
    """`arl export pairs` of a scripted policy: `arl train dpo`'s pairs, token for token in
    TRL's DPOTrainer on the exported GPT-2; its first step's loss is ln 2 (policy = reference),
    and its chosen log-prob is arl's over every completion token (observations included)."""
    import math

    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from arl.batch import collate
    from arl.export import prompt_length
    from arl.losses import episode_logp, token_logprobs

    ckpt = save_checkpoint(tiny_model, tmp_path / "ckpt")
    assert cli("export", "hf", str(ckpt), str(tmp_path / "hf"), *BUGFIX)[0] == 0
    code, out, err = cli("export", "pairs", str(tmp_path / "p"), "--policy", "blind", "--seed", "1")
    assert code == 0, err
    ds = datasets.Dataset.from_parquet(str(tmp_path / "p" / "train_pairs.parquet"))
    pairs, trajs = _arl_pairs("blind", 8, 1)
    _check_pairs(ds, pairs, trajs, 8, lambda ids: " ".join(vocab.decode(ids)))
    assert f"wrote {len(pairs)} (chosen, rejected) pairs from 160 episodes" in out
    trainer, log = _dpo_step(trl, tmp_path / "hf", ds, tmp_path / "dpo")
    _check_trl_saw_the_episodes(trainer, pairs, vocab.id("<end>"))
    assert log["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert log["rewards/margins"] == 0.0 and log["grad_norm"] > 0
    chosen = collate([c for c, _ in pairs])
    after = torch.zeros_like(chosen.action_mask)  # (B, T) over targets: ids[1:]
    for b, (c, _) in enumerate(pairs):
        after[b, prompt_length(c) - 1 : len(c) - 1] = 1  # TRL's completion: all after the prompt
    with torch.no_grad():
        logp = token_logprobs(tiny_model.eval(), chosen)
    assert log["logps/chosen"] == pytest.approx(float(episode_logp(logp, after).mean()), rel=1e-4)
    actions = float(episode_logp(logp, chosen.action_mask).mean())  # arl's DPO sums these only
    assert log["logps/chosen"] < actions - 1.0


def test_model_pairs_in_trl_dpo(tmp_path, cli, tiny_dir):
    """A scripted policy's pairs in a real model's tokens: the same pairs as in TinyAgent's
    words (the outcomes do not depend on the renderer), the model's chat text, and TRL's
    DPOTrainer tokenizes them back into the episodes' ids."""
    import math

    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from arl.hf.policy import load_hf

    chat = load_hf(str(tiny_dir)).renderer
    out = tmp_path / "p.parquet"
    code, _, err = cli(
        "export", "pairs", str(out), "--model", str(tiny_dir), "--policy", "blind", "--samples", "4"
    )
    assert code == 0, err
    ds = datasets.Dataset.from_parquet(str(out))
    pairs, trajs = _arl_pairs("blind", 4, 0, chat)
    words, _ = _arl_pairs("blind", 4, 0)
    assert [(c.task, c.reward, r.reward) for c, r in pairs] == [
        (c.task, c.reward, r.reward) for c, r in words
    ]
    decode = lambda ids: chat.tokenizer.decode(list(ids), skip_special_tokens=False)  # noqa: E731
    _check_pairs(ds, pairs, trajs, 4, decode)
    assert "<|im_start|>system" in ds[0]["prompt"] and ds[0]["chosen"].endswith("<|im_end|>")
    four = ds.select(range(4))
    trainer, log = _dpo_step(trl, tiny_dir, four, tmp_path / "dpo")
    _check_trl_saw_the_episodes(trainer, pairs[:4], chat.end_id)
    assert log["loss"] == pytest.approx(math.log(2), abs=1e-6)


# --- train: --init beside --model -------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["pg", "--set", "out={out}"],
        ["distill", "--teacher", "weak", "--set", "out={out}"],
        ["sft", "--out", "{out}"],
        ["rft", "--out", "{out}"],
        ["dpo", "--out", "{out}"],
    ],
)
def test_train_refuses_init_beside_model(cli, tmp_path, argv):
    """--model replaces the starting policy: an --init beside it, even its default's name, is
    refused in one line before anything is claimed or loaded (it used to be ignored)."""
    out = tmp_path / "run"
    argv = [a.format(out=out) for a in argv]
    code, _, err = cli("train", *argv, "--model", str(tmp_path / "m"), "--init", "cold")
    assert code == 2 and "--init cold and --model" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_train_pg_sweep_refuses_model(cli, tmp_path):
    out = tmp_path / "run"
    code, _, err = cli(
        "train", "pg", "--model", str(tmp_path / "m"), "--sweep", "seed=0,1", "--set", f"out={out}"
    )
    assert code == 2 and "--sweep" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_pair_text_leaves_a_tokenizers_own_bos_to_trl(transformers):
    """A tokenizer that adds a BOS to any text (as Llama's do): the prompt's text starts after
    the episode's BOS, so TRL's tokenization, which adds it, gives back the episode's ids."""
    from types import SimpleNamespace

    from tokenizers.processors import TemplateProcessing

    from arl.export import split_text
    from arl.hf.tiny import build_tokenizer
    from arl.types import ENV, PROMPT, Trajectory

    tok = build_tokenizer()
    bos = tok.convert_tokens_to_ids("<|endoftext|>")
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", bos)]
    )
    parts = ("<|im_start|>user\nfix x<|im_end|>\n<|im_start|>assistant\n", "read<|im_end|>")
    parts += ("\n<|im_start|>tool\nok<|im_end|>",)
    (head, call, obs) = (tok(p, add_special_tokens=False)["input_ids"] for p in parts)
    ids = [bos, *head, *call, *obs]
    owners = [PROMPT] * (1 + len(head)) + [POLICY] * len(call) + [ENV] * len(obs)
    tr = Trajectory("x", tuple(ids), tuple(owners), (0.0,) * len(ids), (), 0.0)
    prompt, rest, exact = split_text(tr, SimpleNamespace(tokenizer=tok))
    assert prompt == parts[0] and rest == parts[1] + parts[2]  # no "<|endoftext|>" in front
    assert exact and tok(prompt + rest)["input_ids"] == ids  # one BOS, as sampled


def test_export_hf_takes_the_environment_the_checkpoint_records(tmp_path, cli, transformers):
    """No --env: the checkpoint's recorded env (or the one environment its vocabulary's digest
    names); neither: exit 2, one line naming --env. A recorded vocabulary other than the
    environment's is refused though the sizes agree (check_vocab compares the words)."""
    from arl.rollout import vocab_of, vocab_record

    codefix = _random_agent(vocab_of("codefix"))
    save_checkpoint(codefix, tmp_path / "named", extra=vocab_record("codefix"))
    code, _, err = cli("export", "hf", str(tmp_path / "named"), str(tmp_path / "hf1"))
    assert code == 0, err
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf1")
    assert tok.get_vocab() == vocab_of("codefix").index
    # the name unknown here, the digest names one environment: that one
    digest_only = {"env": "gone", "vocab": vocab_of("codefix").digest()}
    save_checkpoint(codefix, tmp_path / "digest", extra=digest_only)
    assert cli("export", "hf", str(tmp_path / "digest"), str(tmp_path / "hf2"))[0] == 0
    # nothing recorded (an older checkpoint): ask for --env, in one line
    save_checkpoint(codefix, tmp_path / "bare")
    code, _, err = cli("export", "hf", str(tmp_path / "bare"), str(tmp_path / "hf3"))
    assert code == 2 and "--env" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "hf3").exists()
    code, _, err = cli(
        "export", "hf", str(tmp_path / "bare"), str(tmp_path / "hf3"), "--env", "codefix"
    )
    assert code == 0, err
    # bugfix and bugfix-judged speak one vocabulary: its digest alone names no one environment
    bugfix = _random_agent(vocab_of("bugfix"))
    save_checkpoint(bugfix, tmp_path / "shared", extra={"vocab": vocab_of("bugfix").digest()})
    code, _, err = cli("export", "hf", str(tmp_path / "shared"), str(tmp_path / "hf4"))
    assert code == 2 and "--env" in err and len(err.splitlines()) == 1
    # the same size, other words: refused, though the sizes agree
    other = {"env": "bugfix", "vocab": "0" * 16}
    save_checkpoint(bugfix, tmp_path / "other", extra=other)
    argv = ["export", "hf", str(tmp_path / "other"), str(tmp_path / "hf5"), "--env", "bugfix"]
    code, _, err = cli(*argv)
    assert code == 2 and "not the bugfix environment's" in err and len(err.splitlines()) == 1


def test_trained_checkpoints_record_their_environment(tmp_path, cli):
    """`arl train sft`'s final checkpoint and PG's ckpt-* record the environment they speak."""
    from arl.rollout import vocab_of, vocab_record
    from arl.train.checkpoint import read_meta

    torch.manual_seed(0)
    shape = dict(n_layer=1, n_embd=32, n_head=2, block_size=256)
    agent = TinyAgent(TinyAgentConfig(vocab_size=len(vocab_of("bugfix")), **shape))
    init = save_checkpoint(agent, tmp_path / "init")
    small = ["--init", str(init), "--quiet", "--eval-samples", "1"]
    code, _, err = cli("train", "sft", *small, "--steps", "1", "--out", str(tmp_path / "sft"))
    assert code == 0, err
    assert vocab_record("bugfix").items() <= read_meta(tmp_path / "sft" / "final").items()
    sets = ["tasks_per_step=2", "group_size=2", "minibatches=1", "steps=1", "eval_every=0"]
    sets += [f"out={tmp_path / 'pg'}"]
    code, _, err = cli(
        "train", "pg", "--init", str(init), "--quiet", *[a for s in sets for a in ("--set", s)]
    )
    assert code == 0, err
    ckpt = sorted((tmp_path / "pg").glob("ckpt-*"))[-1]
    assert read_meta(ckpt)["vocab"] == vocab_of("bugfix").digest()
