"""Tiny random Hugging Face models for tests (no download): build, perturb, ``save_pretrained``; parity helpers.

Needs ``torch`` and ``transformers`` (test extra). Weights are drawn with a fixed seed, then every parameter is
perturbed (norm weights around 1, biases non-zero), so a transposed bias or a skipped norm cannot hide behind
transformers' zero/one initialisation.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from jaxdrive.errors import UserInputError

#: special token ids of the tiny configs (inside the tiny vocabulary).
TINY_VOCAB = 1000
TINY_TOKENS = dict(vision_start_token_id=995, vision_end_token_id=996, image_token_id=997, video_token_id=998)
TINY_EOS = 999

_TEXT = dict(
    vocab_size=TINY_VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    eos_token_id=TINY_EOS,
    bos_token_id=None,
    pad_token_id=0,
)


def tiny_hf_config(family: str, *, tie_word_embeddings: bool = False, text: dict | None = None, vision: dict | None = None):
    """A transformers config of ``family`` ('qwen2_5_vl', 'qwen3_vl', 'qwen3'): hidden 64, 2 layers, vocab 1000."""
    import transformers as tf

    text_kw = dict(_TEXT, **(text or {}))
    if family == "qwen3":
        return tf.Qwen3Config(
            head_dim=16, tie_word_embeddings=tie_word_embeddings, rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            **text_kw,
        )
    if family == "qwen2_5_vl":
        text_kw.setdefault("rope_parameters", dict(rope_type="default", mrope_section=[2, 3, 3], rope_theta=10000.0))
        vis = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text_kw["hidden_size"],
                   patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1])
        return tf.Qwen2_5_VLConfig(text_config=text_kw, vision_config=dict(vis, **(vision or {})),
                                   tie_word_embeddings=tie_word_embeddings, **TINY_TOKENS)
    if family == "qwen3_vl":
        text_kw.setdefault("head_dim", 16)
        text_kw.setdefault(
            "rope_parameters", dict(rope_type="default", mrope_section=[2, 3, 3], mrope_interleaved=True, rope_theta=10000.0)
        )
        vis = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=text_kw["hidden_size"],
                   patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64,
                   deepstack_visual_indexes=[0, 1])
        return tf.Qwen3VLConfig(text_config=text_kw, vision_config=dict(vis, **(vision or {})),
                                tie_word_embeddings=tie_word_embeddings, **TINY_TOKENS)
    raise UserInputError(f"tiny_hf_config: family must be 'qwen2_5_vl', 'qwen3_vl' or 'qwen3', got {family!r}")


def build_hf_model(config, *, seed: int = 0):
    """A float32 transformers model for ``config`` with seeded, perturbed weights, in eval mode."""
    import torch
    import transformers as tf

    cls = {
        "qwen3": tf.Qwen3ForCausalLM,
        "qwen2_5_vl": tf.Qwen2_5_VLForConditionalGeneration,
        "qwen3_vl": tf.Qwen3VLForConditionalGeneration,
    }[config.model_type]
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if name.endswith("norm.weight") or name.endswith("norm1.weight") or name.endswith("norm2.weight") or ".ln_q." in name:
                p.copy_(1.0 + 0.2 * noise)
            elif p.ndim == 1:
                p.copy_(0.1 * noise)
            else:
                p.add_(0.02 * noise)
    return model


def save_tiny_model(family: str, path: str | os.PathLike, *, seed: int = 0, tie_word_embeddings: bool = False,
                    text: dict | None = None, vision: dict | None = None):
    """Build a tiny random model of ``family`` and ``save_pretrained`` it (safetensors) to ``path``; returns it."""
    model = build_hf_model(tiny_hf_config(family, tie_word_embeddings=tie_word_embeddings, text=text, vision=vision),
                           seed=seed)
    model.save_pretrained(os.fspath(path))
    return model


def image_inputs(config, image_sizes: list[tuple[int, int]], *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random flattened patches ``[N, C*T*P*P]`` (float32) and ``image_grid_thw [num_images, 3]`` for images of the
    given ``(height, width)`` pixels (multiples of patch*merge), as transformers' image processor lays them out."""
    vc = config.vision_config
    unit = vc.patch_size * vc.spatial_merge_size
    grids = []
    for h, w in image_sizes:
        if h % unit or w % unit:
            raise UserInputError(f"image_inputs: sizes must be multiples of {unit}, got {(h, w)}")
        grids.append((1, h // vc.patch_size, w // vc.patch_size))
    grid = np.asarray(grids, np.int64)
    n = int(grid.prod(-1).sum())
    dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    pixels = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return pixels, grid


def prompt_with_images(config, grid: np.ndarray, text_before: list[int], text_between: list[int],
                       text_after: list[int]) -> list[int]:
    """Token ids ``text_before <vs> <img>*n0 <ve> text_between <vs> <img>*n1 <ve> ... text_after``."""
    merge = config.vision_config.spatial_merge_size
    ids = list(text_before)
    for i, (t, h, w) in enumerate(np.asarray(grid)):
        if i:
            ids += list(text_between)
        ids += [config.vision_start_token_id] + [config.image_token_id] * int(t * h * w // merge**2)
        ids += [config.vision_end_token_id]
    return ids + list(text_after)


def mm_token_type_ids(config, input_ids: np.ndarray) -> np.ndarray:
    """transformers' ``mm_token_type_ids``: 1 at image-pad tokens, 0 elsewhere."""
    return (np.asarray(input_ids) == config.image_token_id).astype(np.int64)


def hf_logits(hf_model, input_ids, attention_mask=None, pixel_values=None, image_grid_thw=None,
              position_ids=None) -> np.ndarray:
    """transformers' float32 logits ``[B, S, V]`` (passes ``mm_token_type_ids`` so M-RoPE is not dropped)."""
    import torch

    kw: dict[str, Any] = dict(input_ids=torch.as_tensor(np.asarray(input_ids), dtype=torch.long))
    if attention_mask is not None:
        kw["attention_mask"] = torch.as_tensor(np.asarray(attention_mask), dtype=torch.long)
    if pixel_values is not None:
        kw["pixel_values"] = torch.as_tensor(np.asarray(pixel_values))
        kw["image_grid_thw"] = torch.as_tensor(np.asarray(image_grid_thw))
    if hf_model.config.model_type != "qwen3":
        kw["mm_token_type_ids"] = torch.as_tensor(mm_token_type_ids(hf_model.config, input_ids))
    if position_ids is not None:
        kw["position_ids"] = torch.as_tensor(np.asarray(position_ids), dtype=torch.long)
    with torch.no_grad():
        return hf_model(**kw).logits.float().numpy()


def layer_parity(model, hf_model, input_ids, attention_mask=None, pixel_values=None, image_grid_thw=None) -> list[float]:
    """Per-layer max |Δ| of hidden states (ours vs transformers') at valid positions, for debugging a mismatch.

    Entry 0 is the input embeddings (after image splicing), entry ``i`` the output of decoder layer ``i-1`` (the
    last entry is compared after the final norm, as transformers reports it).
    """
    import torch
    from flax import nnx

    inputs = model.prepare_inputs(input_ids, attention_mask, pixel_values, image_grid_thw)
    final, _, ours = nnx.jit(lambda m, x: m.forward_hidden(x, return_layers=True))(model, inputs)
    ours = [np.asarray(h) for h in ours]
    ours[-1] = np.asarray(final)
    kw: dict[str, Any] = dict(input_ids=torch.as_tensor(np.asarray(input_ids), dtype=torch.long), output_hidden_states=True)
    if attention_mask is not None:
        kw["attention_mask"] = torch.as_tensor(np.asarray(attention_mask), dtype=torch.long)
    if pixel_values is not None:
        kw["pixel_values"] = torch.as_tensor(np.asarray(pixel_values))
        kw["image_grid_thw"] = torch.as_tensor(np.asarray(image_grid_thw))
        kw["mm_token_type_ids"] = torch.as_tensor(mm_token_type_ids(hf_model.config, input_ids))
    with torch.no_grad():
        theirs = [h.float().numpy() for h in hf_model(**kw).hidden_states]
    valid = np.asarray(inputs.attention_mask)
    return [float(np.abs(a - b)[valid].max()) for a, b in zip(ours, theirs)]
