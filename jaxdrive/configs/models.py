"""Model presets: the shapes of the released Qwen checkpoints and the tiny test models, plus the sharding rules.

A preset is an ``ml_collections.ConfigDict`` with ``hf_config`` (a ``config.json`` dict that
``jaxdrive.models.parse_config`` accepts), a suggested ``mesh`` (data, fsdp, tensor) for one 8-accelerator host,
``dtype`` and ``logical_axis_rules`` (``jaxdrive.parallel.LOGICAL_AXIS_RULES`` unless overridden). Loading a real
checkpoint always reads its own ``config.json``; presets serve planning (memory, sharding) and abstract models
(``jaxdrive.models.weights.abstract_model(parse_config(preset.hf_config))``).

    python -c "from jaxdrive.configs.models import get_config; print(get_config('qwen2_5_vl_7b'))"
"""
from __future__ import annotations

import copy

import ml_collections

from jaxdrive.errors import UserInputError
from jaxdrive.parallel import LOGICAL_AXIS_RULES

_QWEN25_VISION = dict(
    model_type="qwen2_5_vl_vision", depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, in_channels=3,
    patch_size=14, spatial_merge_size=2, temporal_patch_size=2, tokens_per_second=2, window_size=112,
    fullatt_block_indexes=[7, 15, 23, 31], hidden_act="silu",
)
_QWEN3VL_VISION = dict(
    model_type="qwen3_vl_vision", in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
    num_position_embeddings=2304, hidden_act="gelu_pytorch_tanh",
)
_VL_TOKENS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653)


def _qwen25_vl(hidden, inter, layers, heads, kv, vocab, tie):
    text = dict(model_type="qwen2_5_vl_text", vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv, rms_norm_eps=1e-6,
                hidden_act="silu", eos_token_id=151645,
                rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[16, 24, 24]))
    return dict(model_type="qwen2_5_vl", text_config=text, vision_config=dict(_QWEN25_VISION, out_hidden_size=hidden),
                tie_word_embeddings=tie, **_VL_TOKENS)


def _qwen3_vl(hidden, inter, layers, heads, kv, tie, vision):
    text = dict(model_type="qwen3_vl_text", vocab_size=151936, hidden_size=hidden, intermediate_size=inter,
                num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv, head_dim=128,
                rms_norm_eps=1e-6, hidden_act="silu", eos_token_id=151645,
                rope_parameters=dict(rope_type="default", rope_theta=5e6, mrope_section=[24, 20, 20],
                                     mrope_interleaved=True))
    return dict(model_type="qwen3_vl", text_config=text, vision_config=dict(_QWEN3VL_VISION, out_hidden_size=hidden, **vision),
                tie_word_embeddings=tie, **_VL_TOKENS)


def _tiny(family):
    text = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, rms_norm_eps=1e-6, hidden_act="silu", eos_token_id=999)
    tokens = dict(vision_start_token_id=995, vision_end_token_id=996, image_token_id=997, video_token_id=998)
    if family == "qwen3":
        return dict(model_type="qwen3", head_dim=16, tie_word_embeddings=True,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0), **text)
    if family == "qwen2_5_vl":
        text["rope_parameters"] = dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1])
        return dict(model_type="qwen2_5_vl", text_config=text, vision_config=vision, **tokens)
    text.update(head_dim=16, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3],
                                                  mrope_interleaved=True))
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64, deepstack_visual_indexes=[0, 1],
                  hidden_act="gelu_pytorch_tanh")
    return dict(model_type="qwen3_vl", text_config=text, vision_config=vision, **tokens)


#: name -> (hf_config, mesh (data, fsdp, tensor), dtype)
PRESETS = {
    "tiny_qwen3": (_tiny("qwen3"), (1, 1, 1), "float32"),
    "tiny_qwen2_5_vl": (_tiny("qwen2_5_vl"), (1, 1, 1), "float32"),
    "tiny_qwen3_vl": (_tiny("qwen3_vl"), (1, 1, 1), "float32"),
    "qwen2_5_vl_3b": (_qwen25_vl(2048, 11008, 36, 16, 2, 151936, True), (1, 8, 1), "bfloat16"),
    "qwen2_5_vl_7b": (_qwen25_vl(3584, 18944, 28, 28, 4, 152064, False), (1, 4, 2), "bfloat16"),
    "qwen3_vl_2b": (_qwen3_vl(2048, 6144, 28, 16, 8, True,
                              dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16,
                                   deepstack_visual_indexes=[5, 11, 17])), (1, 8, 1), "bfloat16"),
    "qwen3_vl_8b": (_qwen3_vl(4096, 12288, 36, 32, 8, False,
                              dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                                   deepstack_visual_indexes=[8, 16, 24])), (1, 4, 2), "bfloat16"),
    "qwen3_8b": (dict(model_type="qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                      num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                      rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=False, eos_token_id=151645,
                      rope_parameters=dict(rope_type="default", rope_theta=1e6)), (1, 4, 2), "bfloat16"),
}


def get_config(name: str = "tiny_qwen2_5_vl") -> ml_collections.ConfigDict:
    """The preset ``name`` (one of :data:`PRESETS`) as a ConfigDict."""
    if name not in PRESETS:
        raise UserInputError(f"model preset: expected one of {sorted(PRESETS)}, got {name!r}")
    hf_config, mesh, dtype = PRESETS[name]
    cfg = ml_collections.ConfigDict()
    cfg.name = name
    cfg.hf_config = copy.deepcopy(hf_config)
    cfg.mesh = ml_collections.ConfigDict(dict(zip(("data", "fsdp", "tensor"), mesh)))
    cfg.dtype = dtype
    cfg.logical_axis_rules = [list(r) for r in LOGICAL_AXIS_RULES]
    return cfg
