"""The offline tool-calling chat model (arl.train.tool_model): its data in the model's own
native calls, its pretraining text as the model reads it, one build per config (cached,
the same bytes), and `arl train tool-model`."""

import pytest

pytest.importorskip("transformers")

from arl.cli.main import main  # noqa: E402
from arl.env import get_environment  # noqa: E402
from arl.hf.policy import load_hf  # noqa: E402
from arl.train.tool_model import (  # noqa: E402
    ToolModelConfig,
    pretrain_ids,
    tool_model,
)
from arl.types import POLICY  # noqa: E402

QUICK = ToolModelConfig().quick()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The quick model, built in a cache of its own."""
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("ARL_CACHE", str(cache))
    yield tool_model(QUICK), cache
    mp.undo()


def test_the_model_loads_with_its_native_calls_and_its_data_is_in_them(built):
    path, _ = built
    policy = load_hf(str(path))  # the call format comes back from the folder
    assert policy.renderer.tool_format == "qwen"
    assert type(policy.model).__name__ == "Qwen2ForCausalLM"
    from arl.train.tool_model import play_data

    env = get_environment("bugfix")
    data = play_data(QUICK, policy.renderer, env)
    n_train = len(env.tasks("train"))
    assert len(data) == n_train * (QUICK.blind_per_task + QUICK.unskilled_per_task)
    tok = policy.renderer.tokenizer

    def said(tr) -> str:  # the policy's own tokens (the system text lists every tool)
        return tok.decode([i for i, o in zip(tr.ids_T, tr.owners_T, strict=True) if o == POLICY])

    assert said(data[0]).startswith('<tool_call>\n{"name": "edit"')  # blind: an edit at once
    reads = [tr for tr in data if '{"name": "read"' in said(tr)]
    assert len(reads) == n_train * QUICK.unskilled_per_task  # read-then-guess reads once each
    assert not all(tr.outcome.hidden_pass for tr in data)  # format without skill


def test_pretraining_text_is_the_listing_as_a_read_shows_it(built):
    path, _ = built
    tok = load_hf(str(path)).renderer.tokenizer
    env = get_environment("bugfix")
    ids = pretrain_ids(tok, env)
    assert len(ids) == len(env.corpus())
    text = tok.decode(ids[0])
    assert text == env.text(env.corpus()[0])
    assert " _ " not in text and "_" in text  # identifiers whole, as in a read's answer


def test_one_build_per_config_and_the_same_bytes_in_another_cache(built, tmp_path, monkeypatch):
    path, cache = built
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert tool_model(QUICK) == path  # cached: not rebuilt
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    monkeypatch.setenv("ARL_CACHE", str(tmp_path))
    again = tool_model(QUICK)
    assert again.parent == tmp_path and again.name == path.name
    assert (again / "model.safetensors").read_bytes() == (path / "model.safetensors").read_bytes()
    other = ToolModelConfig(seed=1).quick()
    assert tool_model(other).name != path.name


def test_cli_prints_the_folder_and_refuses_a_bad_seed(built, capsys, monkeypatch):
    path, cache = built
    monkeypatch.setenv("ARL_CACHE", str(cache))
    assert main(["train", "tool-model", "--quick"]) == 0
    assert capsys.readouterr().out.strip() == str(path)
    with pytest.raises(SystemExit) as e:
        main(["train", "tool-model", "--seed", "-1"])
    assert e.value.code == 2


def test_config_refuses_nonsense():
    from arl.errors import ArlError

    with pytest.raises(ArlError):
        ToolModelConfig(hidden=0)
    with pytest.raises(ArlError):
        ToolModelConfig(sft_lr=float("nan"))
