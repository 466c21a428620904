"""A tiny random Qwen2.5-VL judge saved as a pretrained directory (config, safetensors, tokenizer, chat template,
preprocessor config): the CPU preset of the judge recipes and tests. No download: the weights are random
(``models.testing.build_hf_model``) and the tokenizer is the byte-level test tokenizer with Qwen's special tokens
(``models.tokenizer_testing``). The vision tower takes 64 x 64 BEV images in 8-pixel patches (16 image tokens).
"""
from __future__ import annotations

import json
import os

from jaxdrive.models.image_processing import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from jaxdrive.models.tokenizer_testing import TEST_TOKEN_IDS, TEST_VOCAB_SIZE, build_test_tokenizer

IMAGE_SIZE = 64
PATCH = 8


def tiny_judge_config(hidden: int = 64, layers: int = 2, vision_depth: int = 2):
    import transformers as tf

    ids = {k.strip("<|>"): v for k, v in TEST_TOKEN_IDS.items()}
    text = dict(vocab_size=TEST_VOCAB_SIZE, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                eos_token_id=ids["im_end"], bos_token_id=None, pad_token_id=ids["endoftext"],
                rope_parameters=dict(rope_type="default", mrope_section=[2, 3, 3], rope_theta=10000.0))
    vision = dict(depth=vision_depth, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=hidden,
                  patch_size=PATCH, spatial_merge_size=2, temporal_patch_size=2, window_size=4 * PATCH,
                  fullatt_block_indexes=[vision_depth - 1])
    return tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False,
                               image_token_id=ids["image_pad"], video_token_id=ids["video_pad"],
                               vision_start_token_id=ids["vision_start"], vision_end_token_id=ids["vision_end"])


def save_tiny_judge(path: str | os.PathLike, *, seed: int = 0, hidden: int = 64, layers: int = 2) -> str:
    """Writes the tiny judge directory to ``path`` and returns it."""
    from jaxdrive.models.testing import build_hf_model

    path = os.fspath(path)
    build_hf_model(tiny_judge_config(hidden, layers), seed=seed).save_pretrained(path)
    build_test_tokenizer(path)
    pre = {"patch_size": PATCH, "temporal_patch_size": 2, "merge_size": 2, "min_pixels": IMAGE_SIZE * IMAGE_SIZE,
           "max_pixels": IMAGE_SIZE * IMAGE_SIZE, "image_mean": list(OPENAI_CLIP_MEAN), "image_std": list(OPENAI_CLIP_STD)}
    with open(os.path.join(path, "preprocessor_config.json"), "w") as f:
        json.dump(pre, f, indent=2)
    return path
