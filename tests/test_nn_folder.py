"""W8A8 models saved as folders (int8nax.nn.folder, `int8nax convert`): a folder converted once loads
into a model that computes what quantizing the source in the process computes, bit for bit, with
the same W8A8 layers; bad folders are refused by name; `int8nax warm` takes a W8A8 folder."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as mnn
import pytest

pytest.importorskip("mlx_lm")
import mlx_lm  # noqa: E402
import mlx_lm.utils  # noqa: E402

from int8nax import nn  # noqa: E402
from int8nax.bench import model_folder, models  # noqa: E402
from int8nax.commands import cli  # noqa: E402

TIED = models.Config("tiny-folder", "qwen2", 64, 128, 2, 1, 32, depth=2, vocab=256, tied=True)
UNTIED = models.Config("tiny-folder3", "qwen3", 64, 128, 2, 1, 32, depth=2, vocab=300, tied=False)
IDS = mx.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]])


def source(tmp_path, cfg=TIED):
    return model_folder.folder(cfg, cfg.depth, cfg.vocab, cache=tmp_path / "models")


def w8a8_paths(model) -> list[str]:
    return [path for path, m in model.named_modules() if isinstance(m, nn.W8A8Linear)]


@pytest.mark.parametrize("cfg", [TIED, UNTIED], ids=["qwen2-tied", "qwen3-untied"])
def test_a_converted_folder_loads_the_same_model_bit_for_bit(tmp_path, cfg):
    src = source(tmp_path, cfg)
    got = nn.folder.convert(src, tmp_path / "w8a8")
    ref, _ = mlx_lm.load(str(src))
    count = nn.quantize_linears(ref)
    model, tokenizer = nn.folder.load(tmp_path / "w8a8")
    assert got["layers"] == count == len(w8a8_paths(model)) > 0
    assert sorted(nn.folder.w8a8_layers(tmp_path / "w8a8")) == sorted(w8a8_paths(ref)) == sorted(w8a8_paths(model))
    assert mx.array_equal(ref(IDS), model(IDS)).item()
    assert 0 < got["dst_bytes"] < got["src_bytes"]
    assert model.model.layers[0].self_attn.q_proj._group is not None  # sibling groups as quantize_linears makes
    text = "".join(r.text for r in mlx_lm.stream_generate(model, tokenizer, "abc", max_tokens=3))
    assert isinstance(text, str)


def test_skip_lm_head_is_recorded_and_kept_on_load(tmp_path):
    src = source(tmp_path, UNTIED)
    nn.folder.convert(src, tmp_path / "w8a8", skip_lm_head=True)
    model, _ = nn.folder.load(tmp_path / "w8a8", lazy=True)
    assert type(model.lm_head) is mnn.Linear and "lm_head" not in nn.folder.w8a8_layers(tmp_path / "w8a8")
    ref, _ = mlx_lm.load(str(src))
    nn.quantize_linears(ref, predicate=lambda path, m: not path.endswith("lm_head"))
    assert mx.array_equal(ref(IDS), model(IDS)).item()


def test_mlx_lm_refuses_a_w8a8_folder_and_load_refuses_another(tmp_path):
    src = source(tmp_path)
    nn.folder.convert(src, tmp_path / "w8a8")
    with pytest.raises(ValueError, match="parameters not in model"):
        mlx_lm.load(str(tmp_path / "w8a8"))
    assert nn.folder.w8a8_layers(src) is None and nn.folder.w8a8_layers(tmp_path / "none") is None
    with pytest.raises(ValueError, match=r"load: 'folder' must be a W8A8 folder .*mlx_lm.load reads other"):
        nn.folder.load(src)
    with pytest.raises(ValueError, match=r"load: 'folder' must be an mlx-lm model folder"):
        nn.folder.load(tmp_path / "none")


def test_convert_names_what_is_wrong(tmp_path):
    src = source(tmp_path)
    with pytest.raises(ValueError, match=r"convert: 'src' must be an mlx-lm model folder"):
        nn.folder.convert(tmp_path / "none", tmp_path / "out")
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("keep me")
    with pytest.raises(ValueError, match=r"convert: 'dst' must be a new or empty folder"):
        nn.folder.convert(src, full)
    assert (full / "x").read_text() == "keep me"
    nn.folder.convert(src, tmp_path / "w8a8")
    with pytest.raises(ValueError, match=r"convert: 'src' must be a model folder not yet in W8A8 form"):
        nn.folder.convert(tmp_path / "w8a8", tmp_path / "again")
    model, tokenizer, config = mlx_lm.utils.load(str(src), return_config=True)
    mnn.quantize(model, bits=8, group_size=32)
    config["quantization"] = {"group_size": 32, "bits": 8}
    mlx_lm.utils.save(tmp_path / "q8", src, model, tokenizer, config)
    with pytest.raises(ValueError, match=r"convert: 'src' must hold nn.Linear layers to quantize"):
        nn.folder.convert(tmp_path / "q8", tmp_path / "from-q8")
    assert not (tmp_path / "from-q8").exists()


def test_a_folder_whose_weights_do_not_fit_is_refused(tmp_path):
    nn.folder.convert(source(tmp_path), tmp_path / "w8a8")
    config_path = tmp_path / "w8a8" / "config.json"
    config = json.loads(config_path.read_text())
    config["int8nax"]["layers"] = config["int8nax"]["layers"][1:]  # one W8A8 layer fewer than the weights hold
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"its weights do not fit its model: Received 1 parameters not in model"):
        nn.folder.load(tmp_path / "w8a8")


def test_the_commands_convert_and_warm_a_folder(tmp_path, capsys):
    src = source(tmp_path)
    assert cli.main(["convert", "--model", str(src), "--out", str(tmp_path / "w8a8")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("int8nax convert: 14 W8A8 layers of") and "int8nax.nn.folder.load(" in out
    assert cli.main(["convert", "--model", str(src), "--out", str(tmp_path / "w8a8")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("int8nax convert: error: convert: 'dst' must be a new or empty folder") and "Traceback" not in err
    assert cli.main(["warm", "--model", str(tmp_path / "w8a8"), "--max-tokens", "16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["layers"] == 14
    assert cli.main(["warm", "--model", str(tmp_path / "w8a8"), "--skip-lm-head"]) == 2
    assert "--skip-lm-head is for mlx-lm folders" in capsys.readouterr().err


@pytest.mark.parametrize("call, name", [
    (lambda tmp: nn.folder.load(None), "'folder'"),
    (lambda tmp: nn.folder.load(3), "'folder'"),
    (lambda tmp: nn.folder.convert(None, tmp / "out"), "'src'"),
    (lambda tmp: nn.folder.convert(tmp, None), "'dst'"),
])
def test_a_folder_argument_that_is_no_path_is_named(tmp_path, call, name):
    with pytest.raises(TypeError) as info:
        call(tmp_path)
    message = str(info.value)
    assert name in message and "path" in message and ("NoneType" in message or "int" in message)
    assert not (tmp_path / "out").exists()
