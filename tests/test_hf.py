"""A real `transformers` causal LM as a policy: built offline, loaded with from_pretrained."""

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from arl.batch import collate  # noqa: E402
from arl.bugfix.tasks import tasks_for  # noqa: E402
from arl.errors import ArlError  # noqa: E402
from arl.hf.policy import load_hf  # noqa: E402
from arl.hf.tiny import build_tiny  # noqa: E402
from arl.losses import token_logprobs  # noqa: E402
from arl.rollout import rollout_batch, scripted_rollout  # noqa: E402
from arl.types import ENV, POLICY, PROMPT, TEMPLATE  # noqa: E402


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def hf_dir(request, tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp(request.param), arch=request.param)


@pytest.fixture(scope="module")
def policy(hf_dir):
    return load_hf(str(hf_dir))


def _decode(tok, ids):
    return tok.decode(ids, skip_special_tokens=False)


def test_scripted_episode_is_the_chat_template_rendering_token_for_token(policy):
    codec = policy.renderer
    task = tasks_for("train")[0]
    tr = scripted_rollout("oracle", task, renderer=codec)
    # the same conversation rendered whole by the tokenizer's own template
    calls = [codec.decode_call(tr.ids_T[s:e]).text for s, e in tr.calls]
    msgs = codec.messages("fix " + task.name)
    text = _decode(codec.tokenizer, tr.ids_T)
    assert text.startswith(
        codec.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    )
    assert calls == ["read", "edit " + " ".join(_oracle_op(tr, codec)), "test", "submit"]
    full = codec.tokenizer.apply_chat_template(
        msgs + _turns(calls, tr, codec), tokenize=False, add_generation_prompt=False
    )
    whole = codec.tokenizer(full, add_special_tokens=False)["input_ids"]
    # the episode ends at the policy's last end-of-turn; the template adds a newline after it
    assert list(tr.ids_T) == whole[: len(tr.ids_T)]
    assert _decode(codec.tokenizer, whole[len(tr.ids_T) :]).strip() == ""
    # owners: the policy's tokens are its calls and their end-of-turn, the environment's are
    # the tool results, the rest (headers, separators) is template or the prompt
    own = {o: [i for i, oo in zip(tr.ids_T, tr.owners_T, strict=True) if oo == o] for o in range(4)}
    assert _decode(codec.tokenizer, own[POLICY]) == "".join(c + codec.end_token for c in calls)
    tools = [m["content"] for m in _turns(calls, tr, codec) if m["role"] == "tool"]
    assert _decode(codec.tokenizer, own[ENV]) == "".join(tools)
    assert "def" in tools[0] and tools[1:] == ["ok", "passed 3 of 3"]
    assert _decode(codec.tokenizer, own[PROMPT]) == codec.system + "fix " + task.name


def _oracle_op(tr, codec):
    s, e = tr.calls[1]
    return codec.decode_call(tr.ids_T[s:e]).text.split()[1:]


def _turns(calls, tr, codec):
    """assistant / tool messages of a finished episode, from its own tokens."""
    msgs, ends = [], [e for _, e in tr.calls]
    starts = [s for s, _ in tr.calls][1:] + [len(tr.ids_T)]
    for call, e, s_next in zip(calls, ends, starts, strict=True):
        msgs.append({"role": "assistant", "content": call})
        obs = [
            i for i, o in zip(tr.ids_T[e:s_next], tr.owners_T[e:s_next], strict=True) if o == ENV
        ]
        if obs:
            msgs.append({"role": "tool", "content": codec.tokenizer.decode(obs)})
    return msgs


def test_only_the_sampled_call_tokens_get_loss(policy):
    codec = policy.renderer
    trajs = rollout_batch(policy, tasks_for("train")[:4], seed=1)
    trajs += [scripted_rollout("oracle", tasks_for("heldout")[0], renderer=codec)]
    batch = collate(trajs)
    special = {codec.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_start|>",)}
    for b, tr in enumerate(trajs):
        masked = batch.targets[b][batch.action_mask[b].bool()].tolist()
        calls = [i for s, e in tr.calls for i in tr.ids_T[s:e]]
        assert masked == calls  # every call token, and nothing else
        owners = torch.tensor(tr.owners_T)
        ids = torch.tensor(tr.ids_T)
        rendered = ids[owners != POLICY].tolist()  # what the renderer, not the sampler, wrote
        assert rendered.count(next(iter(special))) >= 3  # system, user, assistant headers
        assert set(ids[owners == TEMPLATE].tolist()) >= special  # headers are template
        env_text = codec.tokenizer.decode(ids[owners == ENV].tolist())
        assert "<|im" not in env_text  # tool results hold no template markup
        assert (owners[: len(codec.render_prompt("fix " + tr.task)[0])] != POLICY).all()
        assert (owners == PROMPT).any()


def test_sampler_logprobs_equal_a_recomputed_forward_pass(policy):
    trajs = rollout_batch(policy, tasks_for("heldout")[:6], seed=3)  # ragged observations
    batch = collate(trajs)
    with torch.no_grad():
        logp = token_logprobs(policy, batch)
    m = batch.action_mask.bool()
    assert m.sum() > 30
    torch.testing.assert_close(logp[m], batch.old_logp[m], atol=1e-4, rtol=1e-4)
    assert len({len(t) for t in trajs}) > 1  # the rows really were ragged


def test_cached_rollout_equals_recomputed_rollout(policy):
    tasks = tasks_for("train")[5:9]
    a = rollout_batch(policy, tasks, seed=7)
    b = rollout_batch(policy, tasks, seed=7, use_cache=False)
    assert [t.ids_T for t in a] == [t.ids_T for t in b]
    c = rollout_batch(policy, tasks, seed=7)
    assert [t.logprobs_T for t in a] == [t.logprobs_T for t in c]


def test_appends_take_logits_at_each_rows_last_token_only_and_equal_the_full_head(policy):
    """extend passes logits_to_keep (the rows' distinct last columns) on multi-token appends;
    its (B, V) logits equal those of the LM head over every column, read at each row's last."""
    g, V = torch.Generator().manual_seed(0), policy.config.vocab_size
    steps = [
        (torch.randint(V, (3, 6), generator=g), torch.tensor([6, 2, 4])),  # a prefill
        (torch.randint(V, (3, 5), generator=g), torch.tensor([1, 5, 3])),  # observations
    ]
    seen, real = [], policy.model.forward

    def spy(*a, **kw):
        seen.append(kw.get("logits_to_keep"))
        return real(*a, **kw)

    out, was = {}, policy._keeps_logits
    for keeps in (True, False):
        policy._keeps_logits, got = keeps, []
        cache = policy.new_cache(3)
        policy.model.forward = spy
        try:
            for ids, n in steps:
                with torch.no_grad():
                    got.append(policy.extend(ids, n, cache))
        finally:
            policy.model.forward = real
            policy._keeps_logits = was
        out[keeps] = got
    assert [k.tolist() for k in seen[:2]] == [[1, 3, 5], [0, 2, 4]]  # distinct last columns
    assert seen[2:] == [None, None]
    for a, b in zip(out[True], out[False], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_load_errors_are_one_line(tmp_path):
    with pytest.raises(ArlError, match="--model"):
        load_hf(str(tmp_path / "missing"))
    with pytest.raises(ArlError, match="dtype"):
        load_hf(str(tmp_path), dtype="int3")


# --- every recipe runs on the real backend ------------------------------------------------


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """The tiny Qwen2 after 60 steps of oracle SFT: it reads and passes a few train tasks."""
    from arl.train.sft import SFTConfig, sft_train

    policy = load_hf(str(build_tiny(tmp_path_factory.mktemp("warm"), arch="qwen2")))
    demos = [scripted_rollout("oracle", t, renderer=policy.renderer) for t in tasks_for("train")]
    hist = sft_train(policy, demos, SFTConfig(steps=60, batch_size=20, lr=3e-3), hook_every=0)
    assert hist[-1]["loss"] < hist[0]["loss"] / 5  # the demonstrations are learnable
    return policy, demos


def _params(model):
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def test_one_step_of_each_recipe_changes_the_real_model(warm):
    import copy

    from arl.train.dpo import DPOConfig, dpo_train
    from arl.train.pg import train_pg
    from arl.train.pg_config import PGConfig
    from arl.train.rft import RFTConfig, expert_iteration

    policy, demos = warm
    policy = copy.deepcopy(policy)
    before = _params(policy)
    one_round = RFTConfig(rounds=1, samples_per_task=2, steps_per_round=1, batch_size=4)
    rft = expert_iteration(policy, tasks_for("train"), one_round)
    assert rft[0]["kept"] > 0 and not torch.equal(before, after := _params(policy))
    assert rft[0]["first_calls"]["read"] > 0  # the calls decoded by the model's own tokenizer
    blind = [scripted_rollout("blind", t, renderer=policy.renderer) for t in tasks_for("train")]
    dpo = dpo_train(
        policy,
        copy.deepcopy(policy),
        list(zip(demos[:4], blind[:4], strict=True)),
        DPOConfig(steps=1),
    )
    assert dpo[-1]["chosen_delta"] > dpo[-1]["rejected_delta"]
    assert not torch.equal(after, after2 := _params(policy))
    pg = train_pg(
        policy,
        PGConfig(steps=1, tasks_per_step=4, group_size=4, eval_every=0, out=""),
        tasks=tasks_for("train")[:8],
    )
    assert pg[-1]["tasks_with_grad"] > 0 and not torch.equal(after2, _params(policy))


# --- the command line -------------------------------------------------------------------


def test_train_and_eval_a_real_model_from_the_command_line(hf_dir, tmp_path, capsys):
    import json

    from arl.cli.main import main

    if "llama" in str(hf_dir):
        pytest.skip("the CLI is checked once, on the Qwen2 model")
    out = tmp_path / "sft"
    code = main(
        [
            "train",
            "sft",
            "--model",
            str(hf_dir),
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--eval-samples",
            "1",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    res = json.loads((out / "results.json").read_text())
    assert res["source"] == str(hf_dir) and 0.0 <= res["eval/train_pass_rate"] <= 1.0
    trained = load_hf(str(out / "final"))  # a from_pretrained directory, trained: it changed
    base = load_hf(str(hf_dir))
    assert not torch.equal(_params(trained), _params(base))
    capsys.readouterr()
    assert main(["eval", "--model", str(out / "final"), "--samples", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 20
    for argv, msg in [
        (["eval", "--model", str(tmp_path / "nope"), "--samples", "1"], "--model"),
        (["eval", "weak", "--model", str(hf_dir)], "not both"),
        (
            [
                "train",
                "sft",
                "--init",
                "untrained",
                "--dtype",
                "bfloat16",
                "--out",
                str(tmp_path / "x"),
            ],
            "float32",
        ),
        (
            [
                "train",
                "sft",
                "--model",
                str(hf_dir),
                "--device",
                "cuda:0",
                "--out",
                str(tmp_path / "y"),
            ],
            "CUDA",
        ),
    ]:
        if "cuda" in argv[-3] and torch.cuda.is_available():
            continue
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and "\n" not in err


# --- CodeFix: a real model edits characters through its chat template ---------------------


def test_codefix_oracle_episode_is_text_edits_under_the_chat_template(policy):
    from arl.sandbox import sandbox_available

    if sandbox_available() is not None:
        pytest.skip(f"no sandbox here: {sandbox_available()}")
    from arl.codefix import CODEFIX
    from arl.codefix.tasks import tasks_for as codefix_tasks

    codec = policy.renderer.for_environment(CODEFIX)
    task = codefix_tasks("train")[5]
    tr = scripted_rollout("oracle", task, seed=2, renderer=policy.renderer)
    assert tr.passed and tr.outcome.applied == 1
    text = _decode(codec.tokenizer, tr.ids_T)
    assert codec.system in text and "\n    " in text  # the module's own layout reaches the model
    calls = [codec.decode_call(tr.ids_T[s:e]).text for s, e in tr.calls]
    assert calls[0] == "read" and calls[1].startswith("replace\n<<<<<<< SEARCH\n")
    own = [i for i, o in zip(tr.ids_T, tr.owners_T, strict=True) if o == POLICY]
    assert _decode(codec.tokenizer, own) == "".join(c + codec.end_token for c in calls)
    assert calls[1] in text and tr.outcome.sandbox == "bwrap"


def test_eval_a_real_model_on_codefix_from_the_command_line(hf_dir, capsys):
    import json

    from arl.cli.main import main
    from arl.sandbox import sandbox_available

    if "llama" in str(hf_dir) or sandbox_available() is not None:
        pytest.skip("checked once, on the Qwen2 model, where the sandbox runs")
    code = main(["eval", "--env", "codefix", "--model", str(hf_dir), "--samples", "1", "--json"])
    m = json.loads(capsys.readouterr().out)
    assert code == 0 and m["env"] == "codefix" and m["episodes"] == 28


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run on a GPU machine)")
def test_an_hf_model_on_cuda_gives_the_cpu_logprobs_and_trains_through_the_cli(hf_dir, tmp_path):
    """On CUDA the forward runs on the GPU and only the (B, T) log-probs come back to the
    batch's device; the recipes' CLI trains, checkpoints and evaluates there."""
    from arl.cli.main import main

    cpu, gpu = load_hf(str(hf_dir)), load_hf(str(hf_dir), device="cuda")
    tasks = tasks_for("train")[:4]
    trajs = [scripted_rollout("oracle", t, seed=1, renderer=cpu.renderer) for t in tasks]
    batch = collate(trajs)
    want, got = token_logprobs(cpu, batch), token_logprobs(gpu, batch)
    real = batch.action_mask.bool()  # past a row's end the CPU's buckets give 0, CUDA's pads
    assert got.device == batch.input_ids.device
    assert torch.allclose(got[real], want[real], atol=1e-4), float((got - want)[real].abs().max())
    sft = tmp_path / "sft"
    argv = ["train", "sft", "--model", str(hf_dir), "--steps", "3", "--device", "cuda"]
    assert main([*argv, "--out", str(sft)]) == 0
    pg = ["train", "pg", "--model", str(sft / "final"), "--device", "cuda", "--set", "steps=1"]
    assert main([*pg, "--set", f"out={tmp_path / 'pg'}"]) == 0
    ev = ["eval", "--model", str(sft / "final"), "--device", "cuda", "--samples", "1"]
    assert main([*ev, "--split", "heldout"]) == 0
