"""Model configuration parsed from a Hugging Face ``config.json`` (Qwen2.5-VL, Qwen3-VL, Qwen3 text-only).

One frozen dataclass, :class:`ModelConfig`, with the text decoder's shape in :class:`TextConfig` and the vision
tower's sub-config kept as the raw dict (the towers parse it themselves). The raw ``config.json`` dict, and the raw
``generation_config.json`` dict when the directory has one, are kept so an export writes back exactly what was read.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from jaxdrive.errors import UserInputError

FAMILIES = ("qwen2_5_vl", "qwen3_vl", "qwen3")


@dataclasses.dataclass(frozen=True)
class TextConfig:
    """Shape and numerics of the text decoder.

    ``mrope_section`` is ``None`` for 1-D RoPE (Qwen3 text-only); otherwise its three entries (temporal, height,
    width) sum to ``head_dim // 2``. ``mrope_interleaved`` selects Qwen3-VL's interleaved layout instead of
    Qwen2.5-VL's contiguous chunks.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    mrope_section: tuple[int, int, int] | None
    mrope_interleaved: bool
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    tie_word_embeddings: bool


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """A whole model: family, text decoder, optional vision sub-config and special token ids.

    ``deepstack_layers`` is the number of first decoder layers that receive Qwen3-VL DeepStack features (0 otherwise).
    """

    family: str
    text: TextConfig
    vision: dict[str, Any] | None = dataclasses.field(compare=False)
    image_token_id: int | None
    video_token_id: int | None
    vision_start_token_id: int | None
    spatial_merge_size: int
    deepstack_layers: int
    eos_token_ids: tuple[int, ...]
    raw: dict[str, Any] = dataclasses.field(compare=False, repr=False)
    #: the source directory's ``generation_config.json`` (stop ids, sampling defaults); None without one.
    generation: dict[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def has_vision(self) -> bool:
        return self.vision is not None


def _need(d: dict[str, Any], key: str, where: str, source: str) -> Any:
    if key not in d:
        raise UserInputError(f"{source}: field {where}{key!r} is missing (expected for this model family)")
    return d[key]


# JSON values that are no object (a ``dict``, or a mapping like a preset's ``ml_collections.ConfigDict``)
_NOT_OBJECTS = (list, tuple, str, int, float, type(None))


def _object(value: Any, field: str, source: str) -> dict[str, Any]:
    if isinstance(value, _NOT_OBJECTS):
        raise UserInputError(f"{source}: field {field!r}: expected an object, got {type(value).__name__}")
    return value


def _size(value: Any, field: str, source: str, *, optional: bool = False) -> int | None:
    """A positive integer field (a layer count, width, head count); None when ``optional`` and unset (null)."""
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserInputError(f"{source}: field {field!r}: expected a positive integer, got {value!r}")
    return value


def _rope_params(text: dict[str, Any], source: str) -> dict[str, Any]:
    """Normalise old (`rope_theta` + `rope_scaling`) and new (`rope_parameters`) spellings."""
    rope = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
    rope.setdefault("rope_theta", text.get("rope_theta", rope.get("rope_theta")))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type == "mrope":
        rope_type = "default"
    if rope_type != "default":
        raise UserInputError(f"{source}: rope type {rope_type!r} is not supported (expected 'default' or 'mrope')")
    if rope["rope_theta"] is None:
        raise UserInputError(f"{source}: field 'rope_theta' is missing")
    return rope


def parse_config(raw: dict[str, Any], source: str = "config.json") -> ModelConfig:
    """Parse a ``config.json`` dict of one of :data:`FAMILIES`; raises ``ValueError`` naming ``source`` (the file it
    was read from) and the bad field: missing, or not of its type (the sub-configs objects, the sizes positive
    integers)."""
    if isinstance(raw, _NOT_OBJECTS):
        raise UserInputError(f"{source}: expected a JSON object, got {type(raw).__name__}")
    family = raw.get("model_type")
    if family not in FAMILIES:
        raise UserInputError(f"{source}: model_type must be one of {FAMILIES}, got {family!r}")
    if family == "qwen3":
        text = raw
        vision = None
    else:
        # Qwen2.5-VL configs written by transformers < 4.52 keep the text fields at top level.
        text = _object(raw.get("text_config") or raw, "text_config", source)
        vision = dict(_object(_need(raw, "vision_config", "", source), "vision_config", source))
    where = "" if text is raw else "text_config."

    def size(key: str, optional: bool = False) -> int | None:
        value = text.get(key) if optional else _need(text, key, where, source)
        return _size(value, where + key, source, optional=optional)

    if text.get("use_sliding_window"):
        raise UserInputError(f"{source}: {where}use_sliding_window=true is not supported")
    rope = _rope_params(text, source)
    hidden = size("hidden_size")
    heads = size("num_attention_heads")
    head_dim = size("head_dim", optional=True) if family != "qwen2_5_vl" else None
    head_dim = head_dim or hidden // heads
    section = rope.get("mrope_section") if family != "qwen3" else None
    if section is not None:
        section = tuple(int(s) for s in section)
        if len(section) != 3 or sum(section) != head_dim // 2:
            raise UserInputError(
                f"{source}: {where}rope_parameters.mrope_section must have 3 entries summing to head_dim/2="
                f"{head_dim // 2}, got {list(section)}"
            )
    tie = bool(raw.get("tie_word_embeddings", False) or text.get("tie_word_embeddings", False))
    eos = token_id_tuple(text.get("eos_token_id", raw.get("eos_token_id")), f"{source}: {where}eos_token_id")
    text_cfg = TextConfig(
        vocab_size=size("vocab_size"),
        hidden_size=hidden,
        intermediate_size=size("intermediate_size"),
        num_layers=size("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=size("num_key_value_heads", optional=True) or heads,
        head_dim=int(head_dim),
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope["rope_theta"]),
        mrope_section=section,
        mrope_interleaved=family == "qwen3_vl" or bool(rope.get("mrope_interleaved", False)),
        qkv_bias=family == "qwen2_5_vl" or bool(text.get("attention_bias", False)),
        o_bias=family != "qwen2_5_vl" and bool(text.get("attention_bias", False)),
        qk_norm=family != "qwen2_5_vl",
        tie_word_embeddings=tie,
    )
    if text_cfg.num_heads % text_cfg.num_kv_heads:
        raise UserInputError(
            f"{source}: num_attention_heads={text_cfg.num_heads} must be a multiple of "
            f"num_key_value_heads={text_cfg.num_kv_heads}"
        )
    if text.get("hidden_act", "silu") != "silu":
        raise UserInputError(f"{source}: {where}hidden_act must be 'silu', got {text.get('hidden_act')!r}")
    deepstack = len(vision.get("deepstack_visual_indexes", ())) if (vision and family == "qwen3_vl") else 0
    return ModelConfig(
        family=family,
        text=text_cfg,
        vision=vision,
        image_token_id=raw.get("image_token_id"),
        video_token_id=raw.get("video_token_id"),
        vision_start_token_id=raw.get("vision_start_token_id"),
        spatial_merge_size=int(vision.get("spatial_merge_size", 2)) if vision else 1,
        deepstack_layers=deepstack,
        eos_token_ids=eos,
        raw=raw,
    )


def token_id_tuple(value, where: str) -> tuple[int, ...]:
    """An ``eos_token_id``-style value (None, one id, or a list of ids) as a tuple of ints; ``where`` names it in
    the error."""
    ids = () if value is None else tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise UserInputError(f"{where}: expected a token id or a list of token ids (ints >= 0), got {value!r}")
    return ids


GENERATION_FILE = "generation_config.json"


def read_json_object(file: str) -> dict[str, Any]:
    """The JSON object of ``file``; a ``ValueError`` naming it when it cannot be read or holds another value."""
    try:
        with open(file, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserInputError(f"{file}: cannot read JSON ({e})") from None
    if not isinstance(value, dict):
        raise UserInputError(f"{file}: expected a JSON object, got {type(value).__name__}")
    return value


def read_generation_config(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The raw ``generation_config.json`` dict of a pretrained ``directory``; None when it has none; a ``ValueError``
    naming the file when it is not a JSON object."""
    file = os.path.join(os.fspath(directory), GENERATION_FILE)
    if not os.path.exists(file):
        return None
    return read_json_object(file)


def stop_token_ids(path: str | os.PathLike) -> tuple[int, ...]:
    """The ids that end a generation for the pretrained directory ``path``, as transformers' ``generate`` reads them:
    ``generation_config.json``'s ``eos_token_id`` (one id or a list: Qwen chat models list ``<|im_end|>`` and
    ``<|endoftext|>``) when the file sets one, else ``config.json``'s; ``()`` when neither does."""
    ids = token_id_tuple((read_generation_config(path) or {}).get("eos_token_id"),
                         f"{os.path.join(os.fspath(path), GENERATION_FILE)}: eos_token_id")
    return ids or load_config(path).eos_token_ids


def load_config(path: str | os.PathLike) -> ModelConfig:
    """Read ``<path>/config.json`` (or ``path`` itself if it is a file) and parse it, with the
    ``generation_config.json`` beside it when there is one (``ModelConfig.generation``). A missing directory or file,
    a file that is not a JSON object and a missing or mistyped field are a ``ValueError`` naming the file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise UserInputError(f"{path}: no such model directory (a pretrained directory holds config.json and weights)")
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise UserInputError(f"{file}: no such file (a pretrained model directory holds its config.json)")
    cfg = parse_config(read_json_object(file), source=file)
    return dataclasses.replace(cfg, generation=read_generation_config(os.path.dirname(file)))
