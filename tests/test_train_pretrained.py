"""``jaxdrive train`` on a pretrained model directory: a tiny random Qwen2.5-VL saved by transformers'
``save_pretrained`` with its own tokenizer and chat template, the "chat_qa" dataset and the "tokenizer" decoder (the
configs a pod run uses, shrunk by overrides only)."""
import argparse
import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import ml_collections  # noqa: E402

from jaxdrive.models import testing as T  # noqa: E402
from jaxdrive.models.tokenizer_testing import TEST_TOKEN_IDS, TEST_VOCAB_SIZE, build_test_tokenizer  # noqa: E402
from jaxdrive.train import jobs  # noqa: E402
from jaxdrive.train.metrics import read_jsonl  # noqa: E402
from jaxdrive.train_cli import add_train_subcommands  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE_SIZE = 56  # 4 x 4 patches of 14 px -> 4 image tokens after the 2 x 2 merge


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("qwen25vl") / "model")
    config = T.tiny_hf_config("qwen2_5_vl", text=dict(vocab_size=TEST_VOCAB_SIZE, eos_token_id=TEST_TOKEN_IDS["<|im_end|>"],
                                                       pad_token_id=TEST_TOKEN_IDS["<|endoftext|>"]))
    for name, token in (("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
                        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")):
        setattr(config, name, TEST_TOKEN_IDS[token])
    T.build_hf_model(config, seed=3).save_pretrained(path)
    build_test_tokenizer(path)
    return path


def _run(job, overrides):
    parser = argparse.ArgumentParser(prog="jaxdrive")
    add_train_subcommands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", job, "--config", os.path.join(ROOT, "configs", f"{job}_chat_qa.py"), *overrides])
    return args.func(args)


def test_chat_qa_examples_follow_the_model_template(model_dir):
    tok = jobs.load_tokenizer(ml_collections.ConfigDict(dict(kind="pretrained", path=model_dir)))
    cfg = ml_collections.ConfigDict(dict(kind="chat_qa", path="", num_examples=3, seed=0, image_size=IMAGE_SIZE))
    examples = jobs.build_examples(cfg, tok)
    assert len(examples) == 3
    for e in examples:
        prompt = tok.decode(e["prompt"].tolist())
        assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
        assert "<|vision_start|>" + "<|image_pad|>" * 4 + "<|vision_end|>What colour" in prompt
        assert tok.decode(e["answer"].tolist()) == e["answer_text"] + "<|im_end|>"
        assert e["pixel_values"].shape == (16, 3 * 2 * 14 * 14) and e["image_grid_thw"].tolist() == [[1, 4, 4]]


def test_chat_qa_reads_jsonl_records(model_dir, tmp_path):
    import PIL.Image

    PIL.Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "a.png")
    (tmp_path / "qa.jsonl").write_text('{"question": "Colour?", "answer": "red", "image": "a.png", "system": "Be brief."}\n')
    tok = jobs.load_tokenizer(ml_collections.ConfigDict(dict(kind="pretrained", path=model_dir)))
    cfg = ml_collections.ConfigDict(dict(kind="chat_qa", path=str(tmp_path / "qa.jsonl"), image_size=IMAGE_SIZE))
    (e,) = jobs.build_examples(cfg, tok)
    assert tok.decode(e["prompt"].tolist()).startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert e["answer_text"] == "red" and e["pixel_values"].shape == (16, 1176)
    (tmp_path / "bad.jsonl").write_text('{"question": "Colour?"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: field 'answer'"):
        jobs.build_examples(ml_collections.ConfigDict(dict(kind="chat_qa", path=str(tmp_path / "bad.jsonl"))), tok)


def test_train_sft_then_grpo_on_the_pretrained_directory(model_dir, tmp_path, capsys):
    common = [f"model.path='{model_dir}'", "model.dtype='float32'", "progress=False", "log_every=1",
              "data.num_examples=8", f"data.image_size={IMAGE_SIZE}", "checkpoint.enabled=False"]
    sft_dir = tmp_path / "sft"
    assert _run("sft", common + [f"workdir='{sft_dir}'", "steps=8", "batch_size=4", "data.max_len=160",
                                 "optim.lr=1e-2", "optim.warmup_steps=1"]) == 0
    losses = [r["train/loss"] for r in read_jsonl(str(sft_dir / "metrics.jsonl"))]
    assert len(losses) == 8 and np.isfinite(losses).all()
    assert np.mean(losses[-2:]) < 0.7 * np.mean(losses[:2])  # it learns the template's answer span
    grpo_dir = tmp_path / "grpo"
    assert _run("grpo", common + [f"workdir='{grpo_dir}'", "steps=2", "grpo.group_size=4", "grpo.prompts_per_step=2",
                                  "grpo.prompt_len=160", "grpo.completion_len=4", "optim.lr=1e-3",
                                  "optim.warmup_steps=1"]) == 0
    records = read_jsonl(str(grpo_dir / "metrics.jsonl"))
    assert [r["step"] for r in records] == [1, 2], records
    assert all(0.0 <= r["train/reward_mean"] <= 1.0 and np.isfinite(r["train/loss"]) for r in records)
    assert "done: step 2" in capsys.readouterr().out


def test_grpo_stop_ids_come_from_the_generation_config(tmp_path):
    """Qwen chat checkpoints list two stop tokens in generation_config.json (<|im_end|>, <|endoftext|>); with
    ``eos_id`` unset the rollout stops on both (the tokenizer's eos alone was <|im_end|>). A config naming one
    ``eos_id`` keeps stopping on that one; ``stop_ids`` is the explicit set; bad values name the field."""
    import json

    im_end, endoftext = TEST_TOKEN_IDS["<|im_end|>"], TEST_TOKEN_IDS["<|endoftext|>"]
    tok = argparse.Namespace(eos_token_id=im_end, pad_token_id=endoftext)
    T.tiny_hf_config("qwen3", text=dict(eos_token_id=im_end)).to_json_file(str(tmp_path / "config.json"))
    block = ml_collections.ConfigDict(dict(eos_id=None, pad_id=None, stop_ids=None))
    assert list(jobs.token_ids(block, tok, str(tmp_path)).stop_ids) == [im_end]  # no generation_config.json
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [im_end, endoftext]}))
    g = jobs.token_ids(block, tok, str(tmp_path))
    assert (list(g.stop_ids), g.eos_id, g.pad_id) == ([im_end, endoftext], im_end, endoftext)
    assert list(jobs.token_ids(ml_collections.ConfigDict(dict(eos_id=7)), tok, str(tmp_path)).stop_ids) == [7]
    assert list(jobs.token_ids(ml_collections.ConfigDict(dict(stop_ids=[7, 8])), tok).stop_ids) == [7, 8]
    assert list(jobs.token_ids(ml_collections.ConfigDict(dict(eos_id=None))).stop_ids) == [1]  # tiny recipes
    with pytest.raises(ValueError, match="stop_ids"):
        jobs.token_ids(ml_collections.ConfigDict(dict(stop_ids=["<|im_end|>"])), tok)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": "x"}))
    with pytest.raises(ValueError, match="generation_config.json: eos_token_id"):
        jobs.token_ids(block, tok, str(tmp_path))
