"""A tiny random Qwen2.5-VL judge saved as a pretrained directory (config, safetensors, tokenizer, chat template,
preprocessor config): the CPU preset of the judge recipes and tests. No download: the weights are random
(``models.testing.build_hf_model``). The tokenizer is either the byte-level test tokenizer with Qwen's special tokens
(``models.tokenizer_testing``, ``tokenizer="bytes"``) or, by default (``tokenizer="judge"``), a byte-level BPE with
merges learnt from the judge's own texts (system prompt, answer blocks, ego status and scene descriptions of generated
scenes; ``build_judge_tokenizer``): any text still round-trips, the special tokens keep the test tokenizer's ids, and
a judge conversation is about 4x shorter than in bytes (the rule answers are single ``yes`` / ``no`` tokens), which
is what makes CPU training of the tiny judge take minutes. The vision tower takes 64 x 64 BEV images in 8-pixel
patches (16 image tokens).
"""
from __future__ import annotations

import json
import os

from jaxdrive.errors import UserInputError
from jaxdrive.models.image_processing import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from jaxdrive.models.tokenizer_testing import (QWEN_SPECIAL_TOKENS, QWEN_VL_CHAT_TEMPLATE, TEST_TOKEN_IDS,
                                               TEST_VOCAB_SIZE, _bytes_to_unicode, build_test_tokenizer)

IMAGE_SIZE = 64
PATCH = 8
JUDGE_VOCAB_SIZE = 1024


def judge_corpus(num_scenes: int = 12) -> list[str]:
    """Texts the judge tokenizer learns its merges from: the system prompt, every answer block, and the ego status
    and descriptions (each with some broken rules) of every proposal of ``num_scenes`` generated scenes."""
    from itertools import product

    from jaxdrive.data.synthetic import generate_scene
    from jaxdrive.judge import prompt as P
    from jaxdrive.judge.gates import RULE_LABELS
    from jaxdrive.judge.synthetic import NUM_PROPOSALS, PROFILE

    texts = [P.SYSTEM_TEXT, " Answer one line per rule: " + ", ".join(RULE_LABELS) + "."]
    texts += [P.answer_text(g) for g in product((True, False), repeat=len(RULE_LABELS))]
    for seed in range(num_scenes):
        scene = generate_scene(seed, num_proposals=NUM_PROPOSALS, profile=PROFILE, validate=False)
        texts.append(P.ego_status(scene))
        for k in range(scene.num_proposals):
            broken = [r for i, r in enumerate(RULE_LABELS) if (seed + k) >> i & 1]
            texts.append(P.describe_scene(scene, k, broken=broken))
    return texts


def build_judge_tokenizer(path: str | os.PathLike, vocab_size: int = JUDGE_VOCAB_SIZE):
    """A byte-level BPE whose merges are learnt from ``judge_corpus``; ids 0-255 are the bytes and 256-262 the Qwen
    special tokens (as the test tokenizer), learnt tokens follow. Saved (``save_pretrained``) to ``path``; returns
    the tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    learner = Tokenizer(models.BPE())
    learner.pre_tokenizer = pre
    learner.train_from_iterator(judge_corpus(), trainers.BpeTrainer(
        vocab_size=vocab_size - len(QWEN_SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    model = json.loads(learner.to_str())["model"]
    vocab = {ch: byte for byte, ch in _bytes_to_unicode().items()}
    vocab.update(TEST_TOKEN_IDS)
    for token in sorted(model["vocab"], key=model["vocab"].get):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(QWEN_SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=QWEN_VL_CHAT_TEMPLATE)
    for token, expected in TEST_TOKEN_IDS.items():
        if fast.convert_tokens_to_ids(token) != expected:
            raise AssertionError(f"special token {token}: id {fast.convert_tokens_to_ids(token)}, expected {expected}")
    os.makedirs(path, exist_ok=True)
    fast.save_pretrained(os.fspath(path))
    return fast


def tiny_judge_config(hidden: int = 64, layers: int = 2, vision_depth: int = 2, vocab_size: int = TEST_VOCAB_SIZE):
    """The tiny judge's ``Qwen2_5_VLConfig``: 4 heads of ``hidden / 4``, whose rotary half splits 2 : 3 : 3 over
    (time, height, width) at ``hidden`` 64 ([2, 3, 3], as Qwen's [16, 24, 24]); ``hidden`` a multiple of 16, >= 32,
    ``layers`` >= 1 (a ValueError naming the argument otherwise)."""
    import transformers as tf

    if hidden < 32 or hidden % 16:
        raise UserInputError(f"hidden: expected a multiple of 16, >= 32 (4 heads of an even size), got {hidden}")
    if layers < 1:
        raise UserInputError(f"layers: expected >= 1, got {layers}")
    half = hidden // 8  # head_dim / 2, what the three M-RoPE sections share
    height = width = 3 * half // 8
    ids = {k.strip("<|>"): v for k, v in TEST_TOKEN_IDS.items()}
    text = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                eos_token_id=ids["im_end"], bos_token_id=None, pad_token_id=ids["endoftext"],
                rope_parameters=dict(rope_type="default", mrope_section=[half - height - width, height, width],
                                     rope_theta=10000.0))
    vision = dict(depth=vision_depth, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=hidden,
                  patch_size=PATCH, spatial_merge_size=2, temporal_patch_size=2, window_size=4 * PATCH,
                  fullatt_block_indexes=[vision_depth - 1])
    return tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                               image_token_id=ids["image_pad"], video_token_id=ids["video_pad"],
                               vision_start_token_id=ids["vision_start"], vision_end_token_id=ids["vision_end"])


def save_tiny_judge(path: str | os.PathLike, *, seed: int = 0, hidden: int = 64, layers: int = 2,
                    tokenizer: str = "judge") -> str:
    """Writes the tiny judge directory to ``path`` and returns it; ``tokenizer``: ``"judge"`` (learnt merges,
    ``build_judge_tokenizer``) or ``"bytes"`` (the byte-level test tokenizer)."""
    from jaxdrive.models.testing import build_hf_model

    if tokenizer not in ("judge", "bytes"):
        raise UserInputError(f"tokenizer: expected 'judge' or 'bytes', got {tokenizer!r}")
    path = os.fspath(path)
    tok = build_judge_tokenizer(path) if tokenizer == "judge" else build_test_tokenizer(path)
    build_hf_model(tiny_judge_config(hidden, layers, vocab_size=len(tok)), seed=seed).save_pretrained(path)
    pre = {"patch_size": PATCH, "temporal_patch_size": 2, "merge_size": 2, "min_pixels": IMAGE_SIZE * IMAGE_SIZE,
           "max_pixels": IMAGE_SIZE * IMAGE_SIZE, "image_mean": list(OPENAI_CLIP_MEAN), "image_std": list(OPENAI_CLIP_STD)}
    with open(os.path.join(path, "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=2)
    return path


def main(argv: list[str] | None = None) -> None:
    """``python -m jaxdrive.judge.tiny OUT [HIDDEN [LAYERS]] [--seed S] [--tokenizer judge|bytes]``: writes the
    tiny judge directory (``save_tiny_judge``) and prints its path; a bad argument is a usage error (exit 2)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m jaxdrive.judge.tiny",
                                description="Write a tiny random Qwen2.5-VL judge directory (no download).")
    p.add_argument("out", metavar="OUT", help="output directory")
    p.add_argument("hidden", metavar="HIDDEN", nargs="?", type=int, default=64,
                   help="text hidden size, a multiple of 16, >= 32 (default 64)")
    p.add_argument("layers", metavar="LAYERS", nargs="?", type=int, default=2, help="text decoder layers (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument("--tokenizer", choices=("judge", "bytes"), default="judge",
                   help="judge: BPE merges learnt from the judge's texts (default); bytes: the byte-level test "
                        "tokenizer")
    args = p.parse_args(argv)
    try:
        tiny_judge_config(args.hidden, args.layers)  # checks the sizes before the tokenizer is built
    except ValueError as e:
        p.error(str(e))
    print(save_tiny_judge(args.out, seed=args.seed, hidden=args.hidden, layers=args.layers, tokenizer=args.tokenizer))


if __name__ == "__main__":
    main()
