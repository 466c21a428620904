"""A pretrained model directory (``config.json`` + safetensors weights) that cannot be loaded is a ``ValueError``
naming the file and what is wrong with it -- a usage error (exit 2) of the CLIs that load one (``judge run --model``).
Before: json's words naming no file (not JSON), an AttributeError traceback (not an object, a list text_config), a
TypeError traceback (a null field), "config.json: ..." without the directory (a missing field), FileNotFoundError
tracebacks (no config.json, no weights), a struct.error traceback (an empty weights file) and numpy's reshape words
naming no file (a weights file cut short)."""
import json
import os
import shutil

import pytest

from jaxdrive.cli import EXIT_USAGE, main
from jaxdrive.models import from_pretrained, load_config
from jaxdrive.models.safetensors_io import INDEX_FILE, SINGLE_FILE
from jaxdrive.train.tiny_recipes import TINY_CONFIG


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny random Qwen2.5-VL directory written by ``save_pretrained`` (config.json, generation_config.json,
    model.safetensors)."""
    from jaxdrive.models.weights import save_pretrained
    from jaxdrive.train.tiny_recipes import tiny_vlm

    path = tmp_path_factory.mktemp("model_dir") / "model"
    save_pretrained(tiny_vlm(0), path)
    return path


def _copy(saved, tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(saved, dst)
    return dst


def _config(**change):
    raw = json.loads(json.dumps(TINY_CONFIG))
    for key, value in change.items():
        if value is ...:
            raw.pop(key)
        else:
            raw[key] = value
    return json.dumps(raw)


def _truncate(file):
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def _resize_first_tensor(file):
    """Declares the first tensor one row longer than its data bytes hold."""
    data = file.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    first = next(k for k in header if k != "__metadata__")
    header[first]["shape"][0] += 1
    blob = json.dumps(header).encode()
    file.write_bytes(len(blob).to_bytes(8, "little") + blob + data[8 + n:])


# (name, edit of the copied directory, what the error says after "<file>: ")
CONFIGS = [
    ("not_json", lambda d: (d / "config.json").write_text('{"model_type": "qwen2_5_vl",'), "cannot read JSON"),
    ("not_an_object", lambda d: (d / "config.json").write_text("[1, 2]"), "expected a JSON object, got list"),
    ("no_hidden_size", lambda d: (d / "config.json").write_text(_config(hidden_size=...)),
     "field 'hidden_size' is missing"),
    ("no_vision_config", lambda d: (d / "config.json").write_text(_config(vision_config=...)),
     "field 'vision_config' is missing"),
    ("null_layers", lambda d: (d / "config.json").write_text(_config(num_hidden_layers=None)),
     "field 'num_hidden_layers': expected a positive integer, got None"),
    ("text_heads", lambda d: (d / "config.json").write_text(_config(num_attention_heads="4")),
     "field 'num_attention_heads': expected a positive integer, got '4'"),
    ("list_text_config", lambda d: (d / "config.json").write_text(_config(text_config=[1])),
     "field 'text_config': expected an object, got list"),
    ("list_vision_config", lambda d: (d / "config.json").write_text(_config(vision_config=[1])),
     "field 'vision_config': expected an object, got list"),
    ("no_model_type", lambda d: (d / "config.json").write_text(_config(model_type=...)), "model_type must be one of"),
    ("no_config", lambda d: (d / "config.json").unlink(), "no such file"),
    ("bad_generation_config", lambda d: (d / "generation_config.json").write_text("{"), "cannot read JSON"),
]
WEIGHTS = [
    ("no_weights", lambda d: (d / SINGLE_FILE).unlink(), f"no {SINGLE_FILE} or {INDEX_FILE}"),
    ("empty_weights", lambda d: (d / SINGLE_FILE).write_bytes(b""), "not a safetensors file"),
    ("truncated_weights", lambda d: _truncate(d / SINGLE_FILE), "cut short"),
    ("garbage_weights", lambda d: (d / SINGLE_FILE).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!"),
     "cannot read its JSON header"),
    ("huge_header", lambda d: (d / SINGLE_FILE).write_bytes(b"\xff" * 8 + b"{}"), "not a safetensors file"),
    ("wrong_size", lambda d: _resize_first_tensor(d / SINGLE_FILE), "data bytes do not hold shape"),
    ("index_not_json", lambda d: (d / INDEX_FILE).write_text("{"), "cannot read JSON"),
    ("index_missing_shard", lambda d: (d / INDEX_FILE).write_text(json.dumps({"weight_map": {"a": "shard-1.bin"}})),
     "shard-1.bin"),
    ("index_no_weight_map", lambda d: (d / INDEX_FILE).write_text("{}"), "expected a 'weight_map' object"),
]
FILE_OF = {"bad_generation_config": "generation_config.json", "no_weights": "", "index_not_json": INDEX_FILE,
           "index_missing_shard": INDEX_FILE, "index_no_weight_map": INDEX_FILE}


def _named(name, model):
    """The path the error of case ``name`` starts with."""
    where = FILE_OF.get(name, "config.json" if name in dict((c[0], c) for c in CONFIGS) else SINGLE_FILE)
    return str(model / where) if where else str(model)


@pytest.mark.parametrize("name,edit,words", CONFIGS + WEIGHTS, ids=[c[0] for c in CONFIGS + WEIGHTS])
def test_from_pretrained_names_the_file(saved, tmp_path, name, edit, words):
    model = _copy(saved, tmp_path)
    edit(model)
    with pytest.raises(ValueError) as e:
        from_pretrained(model)
    msg = str(e.value)
    assert msg.startswith(f"{_named(name, model)}: ") and words in msg, msg


def test_the_valid_directory_loads(saved):
    assert from_pretrained(saved).cfg.text.num_layers == TINY_CONFIG["num_hidden_layers"]


def test_load_config_of_a_missing_directory(tmp_path):
    with pytest.raises(ValueError, match=f"^{tmp_path / 'nope'}: no such model directory"):
        load_config(tmp_path / "nope")


@pytest.fixture(scope="module")
def judge_data(tmp_path_factory):
    """A one-record DriveJudge test set (docs/drivejudge-data.md) that ``judge run`` accepts up to loading --model."""
    from PIL import Image

    from jaxdrive.data.scene_json import write_scene
    from jaxdrive.data.synthetic import generate_scene
    from jaxdrive.judge.dataset import SUBSCORE_KEYS

    root = tmp_path_factory.mktemp("judge_data") / "data"
    (root / "scenes").mkdir(parents=True)
    (root / "images").mkdir()
    scene = generate_scene(2, num_proposals=2)
    write_scene(scene, root / "scenes" / f"{scene.id}.json")
    Image.new("RGB", (8, 8), (40, 60, 20)).save(root / "images" / "r0.png")
    record = {"id": "r0", "scene": f"scenes/{scene.id}.json", "proposal": 0, "proposal_name": scene.proposal_names[0],
              "label": 1, "split": "test", "image": "images/r0.png", "subscores": {m: 1.0 for m in SUBSCORE_KEYS}}
    (root / "records.jsonl").write_text(json.dumps(record) + "\n")
    (root / "meta.json").write_text(json.dumps({"image_size": 8}))
    return root


CLI_CASES = ["not_json", "not_an_object", "no_hidden_size", "null_layers", "no_weights", "truncated_weights"]


@pytest.mark.parametrize("name", CLI_CASES)
def test_judge_run_names_the_model_file(saved, judge_data, tmp_path, capsys, name):
    edit, words = {c[0]: c[1:] for c in CONFIGS + WEIGHTS}[name]
    model = _copy(saved, tmp_path)
    edit(model)
    out = tmp_path / "out"
    assert main(["judge", "run", "--model", str(model), "--data", str(judge_data), "--out", str(out),
                 "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert f"jaxdrive judge: {_named(name, model)}: " in err and words in err, err
    assert not out.exists() or not os.listdir(out)


def test_a_preset_config_dict_still_parses():
    """``parse_config(preset.hf_config)`` (a ConfigDict, jaxdrive.configs.models) is an object, not refused as one."""
    from jaxdrive.configs.models import PRESETS, get_config
    from jaxdrive.models import parse_config

    for name, (hf_config, _, _) in PRESETS.items():
        assert parse_config(get_config(name).hf_config) == parse_config(hf_config)


PREPROCESSOR = [  # before: json's words naming no file, or accepted (every image patched or normalised wrongly)
    ("not_json", "{", "cannot read JSON"),
    ("not_an_object", "[2]", "expected a JSON object, got list"),
    ("patch_size_text", json.dumps({"patch_size": "14"}), "patch_size: expected a positive integer, got '14'"),
    ("merge_size_zero", json.dumps({"merge_size": 0}), "merge_size: expected a positive integer, got 0"),
    ("mean_of_two", json.dumps({"image_mean": [0.5, 0.5]}), "image_mean: expected 3 finite numbers"),
    ("std_a_number", json.dumps({"image_std": 0.5}), "image_std: expected a list of 3 numbers, got 0.5"),
    ("std_zero", json.dumps({"image_std": [0.5, 0.0, 0.5]}), "image_std: expected 3 finite numbers"),
    ("size_a_list", json.dumps({"size": [1, 2]}), "size: expected an object"),
]


@pytest.mark.parametrize("text,words", [c[1:] for c in PREPROCESSOR], ids=[c[0] for c in PREPROCESSOR])
def test_a_bad_preprocessor_config_is_named(tmp_path, text, words):
    """``preprocessor_config.json`` as the judge (``load_image_config``), the chat encoder (its merge size) and the
    chat QA data (``image_config``) read it: one reader, ``read_preprocessor_config``."""
    from jaxdrive.judge.policy import load_image_config
    from jaxdrive.models.image_processing import read_preprocessor_config
    from jaxdrive.train.chat_qa import image_config

    file = tmp_path / "preprocessor_config.json"
    file.write_text(text)
    for read in (read_preprocessor_config, load_image_config, lambda p: image_config(p, 56)):
        with pytest.raises(ValueError) as e:
            read(str(tmp_path))
        assert str(e.value).startswith(f"{file}: ") and words in str(e.value), str(e.value)


def test_a_missing_or_valid_preprocessor_config(tmp_path):
    from jaxdrive.models.image_processing import ImageProcessorConfig, read_preprocessor_config

    assert read_preprocessor_config(tmp_path) is None
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"patch_size": 16, "merge_size": 2, "size": {"shortest_edge": 3136, "longest_edge": 12845056},
         "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}))
    assert read_preprocessor_config(tmp_path) == ImageProcessorConfig(
        patch_size=16, min_pixels=3136, max_pixels=12845056, image_mean=(0.5,) * 3, image_std=(0.5,) * 3)


@pytest.mark.parametrize("text,words", [("{", "cannot read JSON"), ("[1]", "expected a JSON object, got list"),
                                        (json.dumps({"template": "x"}), "chat_template: expected the template text"),
                                        (json.dumps({"chat_template": 3}), "chat_template: expected the template")])
def test_a_bad_chat_template_json_is_named(tmp_path, text, words):
    """``chat_template.json``, read when the tokenizer files hold no template: json's words or a KeyError before."""
    from jaxdrive.models.chat import ChatEncoder
    from jaxdrive.models.tokenizer_testing import QWEN_VL_CHAT_TEMPLATE, build_test_tokenizer

    build_test_tokenizer(str(tmp_path))
    (tmp_path / "chat_template.jinja").unlink()  # the tokenizer's own template
    file = tmp_path / "chat_template.json"
    file.write_text(json.dumps({"chat_template": QWEN_VL_CHAT_TEMPLATE}))
    assert ChatEncoder.from_pretrained(str(tmp_path)).tokenizer.chat_template == QWEN_VL_CHAT_TEMPLATE
    file.write_text(text)
    with pytest.raises(ValueError) as e:
        ChatEncoder.from_pretrained(str(tmp_path))
    assert str(e.value).startswith(f"{file}: ") and words in str(e.value), str(e.value)


@pytest.mark.parametrize("damage", ["no_tokenizer_json", "tokenizer_json_cut_short"])
def test_a_missing_or_damaged_tokenizer_is_named(tmp_path, damage):
    """A directory without tokenizer.json (weights copied without it) was transformers' five-line "Couldn't
    instantiate the backend tokenizer ..." naming no directory; one cut short json's words alone (`judge run`,
    `judge baselines --direct-model`, the judge training kinds)."""
    from jaxdrive.models.chat import ChatEncoder
    from jaxdrive.models.tokenizer_testing import build_test_tokenizer

    build_test_tokenizer(str(tmp_path))
    file = tmp_path / "tokenizer.json"
    if damage == "no_tokenizer_json":
        file.unlink()
    else:
        file.write_text(file.read_text()[:500])
    with pytest.raises(ValueError) as e:
        ChatEncoder.from_pretrained(str(tmp_path))
    assert str(e.value).startswith(f"{tmp_path}: cannot load its tokenizer (") and "\n" not in str(e.value), e.value
