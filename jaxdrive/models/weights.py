"""Hugging Face safetensors <-> NNX model state, both ways, streaming one tensor at a time.

Loading builds the model abstractly (``nnx.eval_shape``: no memory), then for each parameter reads the one HF tensor
it comes from (a memmap view), converts the layout (torch ``Linear.weight [out, in]`` -> our kernel ``[in, out]``),
casts, and ``device_put``-s it with its ``NamedSharding`` when a mesh is given; so a 7B checkpoint is never held
twice in host memory. Both on-disk key layouts are read for every family:

=========================  ===========================  =====================
layout                     text decoder                 vision tower
=========================  ===========================  =====================
legacy (Qwen2.5-VL, Qwen3) ``model.layers.*``           ``visual.*``
nested (Qwen3-VL)          ``model.language_model.*``   ``model.visual.*``
=========================  ===========================  =====================

Export writes the family's own layout (Qwen2.5-VL and Qwen3: legacy; Qwen3-VL: nested) plus ``config.json`` so
``transformers.AutoModel*.from_pretrained`` loads it, and ``generation_config.json`` (token ids and the source's
sampling defaults) so ``generate`` stops and pads as the source model did.
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdrive.errors import UserInputError
from jaxdrive.models.config import GENERATION_FILE, ModelConfig, load_config
from jaxdrive.models.safetensors_io import INDEX_FILE, SINGLE_FILE, SafetensorsDir, write_safetensors
from jaxdrive.models.vlm import QwenModel
from jaxdrive.parallel import LOGICAL_AXIS_RULES, Rules, named_sharding, variable_axes

Path = tuple[str | int, ...]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One HF tensor (full key) <-> one parameter (NNX path), with the layout conversions both ways."""

    key: str
    path: Path
    hf_shape: tuple[int, ...]
    to_ours: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


def _same(x: np.ndarray) -> np.ndarray:
    return x


def _t(x: np.ndarray) -> np.ndarray:
    return x.T


def _prefixes(layout: str) -> tuple[str, str]:
    """(text prefix, vision prefix) of a key layout."""
    if layout == "nested":
        return "model.language_model.", "model.visual."
    return "model.", "visual."


def _text_specs(cfg: ModelConfig, prefix: str) -> list[TensorSpec]:
    t = cfg.text
    h, d = t.hidden_size, t.head_dim
    lm = ("language_model",)
    specs = [TensorSpec(prefix + "embed_tokens.weight", lm + ("embed_tokens", "embedding"), (t.vocab_size, h), _same, _same)]

    def lin(name: str, path: Path, d_in: int, d_out: int, bias: bool) -> None:
        specs.append(TensorSpec(f"{name}.weight", path + ("kernel",), (d_out, d_in), _t, _t))
        if bias:
            specs.append(TensorSpec(f"{name}.bias", path + ("bias",), (d_out,), _same, _same))

    def vec(name: str, path: Path, n: int) -> None:
        specs.append(TensorSpec(f"{name}.weight", path + ("weight",), (n,), _same, _same))

    for i in range(t.num_layers):
        k, p = f"{prefix}layers.{i}.", lm + ("layers", i)
        vec(k + "input_layernorm", p + ("input_layernorm",), h)
        vec(k + "post_attention_layernorm", p + ("post_attention_layernorm",), h)
        a, pa = k + "self_attn.", p + ("self_attn",)
        lin(a + "q_proj", pa + ("q_proj",), h, t.num_heads * d, t.qkv_bias)
        lin(a + "k_proj", pa + ("k_proj",), h, t.num_kv_heads * d, t.qkv_bias)
        lin(a + "v_proj", pa + ("v_proj",), h, t.num_kv_heads * d, t.qkv_bias)
        lin(a + "o_proj", pa + ("o_proj",), t.num_heads * d, h, t.o_bias)
        if t.qk_norm:
            vec(a + "q_norm", pa + ("q_norm",), d)
            vec(a + "k_norm", pa + ("k_norm",), d)
        for name, d_in, d_out in (("gate_proj", h, t.intermediate_size), ("up_proj", h, t.intermediate_size),
                                  ("down_proj", t.intermediate_size, h)):
            lin(k + "mlp." + name, p + ("mlp", name), d_in, d_out, False)
    vec(prefix + "norm", lm + ("norm",), h)
    if not t.tie_word_embeddings:
        lin("lm_head", ("lm_head",), h, t.vocab_size, False)
    return specs


def tensor_specs(model: QwenModel, layout: str) -> list[TensorSpec]:
    """Every parameter of ``model`` with its HF key in ``layout`` ('legacy' or 'nested')."""
    text_prefix, vision_prefix = _prefixes(layout)
    specs = _text_specs(model.cfg, text_prefix)
    if model.visual is not None:
        for v in model.visual.hf_tensor_table():
            specs.append(TensorSpec(vision_prefix + v.name, ("visual",) + tuple(v.path), tuple(v.hf_shape), v.to_ours, v.to_hf))
    return specs


def detect_layout(keys: list[str]) -> str:
    """'nested' if the checkpoint stores ``model.language_model.*``, else 'legacy'."""
    return "nested" if any(k.startswith("model.language_model.") for k in keys) else "legacy"


def _vision_prefix_present(keys: list[str]) -> str | None:
    if any(k.startswith("model.visual.") for k in keys):
        return "model.visual."
    if any(k.startswith("visual.") for k in keys):
        return "visual."
    return None


def abstract_model(cfg: ModelConfig, *, dtype=jnp.float32, param_dtype=None) -> QwenModel:
    """The model with shape-only parameters (``nnx.eval_shape``; allocates nothing)."""
    return nnx.eval_shape(lambda: QwenModel(cfg, dtype=dtype, param_dtype=param_dtype, rngs=nnx.Rngs(0)))


def _names(items: list[str], limit: int = 20) -> str:
    shown = ", ".join(map(repr, items[:limit]))
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def _tied_twin_problems(reader: SafetensorsDir, tied_twin: set[str], embed: TensorSpec) -> list[str]:
    """[] unless the tied model's checkpoint carries an ``lm_head.weight`` that is not the embedding's twin (compared
    in blocks of rows, so a large vocabulary is never read twice into memory)."""
    key = next(iter(tied_twin), None)
    if key is None or key not in reader or embed.key not in reader:
        return []
    head, emb = reader.get(key), reader.get(embed.key)
    same = head.shape == emb.shape and all(
        np.array_equal(head[i:i + 4096], emb[i:i + 4096]) for i in range(0, emb.shape[0], 4096))
    if same:
        return []
    return [f"config.json ties the embeddings (tie_word_embeddings=true) but tensor {key!r} differs from "
            f"{embed.key!r}: an untied checkpoint (set tie_word_embeddings=false; transformers loads it untied)"]


def load_weights(
    model: QwenModel,
    path: str | os.PathLike,
    *,
    mesh: jax.sharding.Mesh | None = None,
    rules: Rules = LOGICAL_AXIS_RULES,
    strict: bool = True,
) -> QwenModel:
    """A new model with the graph of ``model`` (abstract or concrete) and the parameters of HF checkpoint ``path``.

    Every parameter must come from exactly one checkpoint tensor and every checkpoint tensor must be used: missing
    and unexpected tensors are listed by name in a ``ValueError`` raised before anything is loaded (so a VL model
    whose checkpoint lacks its vision tower, or a checkpoint of another architecture, never loads half-way).
    ``lm_head.weight`` in a checkpoint of a model with tied embeddings is not unexpected when it is the embedding's
    twin (equal values): it is ignored, as transformers ignores it; a different one is an error (the config's
    ``tie_word_embeddings`` is wrong for this checkpoint, and transformers would load it untied). ``strict=False``
    is the opt-out for intentional partial loads: unexpected tensors are skipped and parameters without a tensor
    keep ``model``'s values (which must then be concrete); both lists are reported with ``warnings.warn``.
    Mis-shaped tensors are always an error.
    """
    reader = SafetensorsDir(path)
    keys = reader.keys()
    layout = detect_layout(keys)
    specs = tensor_specs(model, layout)
    if model.visual is not None:  # the vision prefix may differ from the text layout in hand-converted checkpoints
        found = _vision_prefix_present(keys)
        want = _prefixes(layout)[1]
        if found and found != want:
            specs = [dataclasses.replace(s, key=found + s.key[len(want):]) if s.path[0] == "visual" else s for s in specs]
    where = f"checkpoint {os.fspath(path)}"
    wanted = {s.key for s in specs}
    tied_twin = {"lm_head.weight"} if model.cfg.text.tie_word_embeddings else set()
    embed_spec = next(s for s in specs if s.path == ("language_model", "embed_tokens", "embedding"))
    unexpected = sorted(k for k in keys if k not in wanted and k not in tied_twin)
    missing = [s for s in specs if s.key not in reader]
    misshaped = [f"tensor {s.key!r}: expected shape {s.hf_shape}, got {reader.shape(s.key)}"
                 for s in specs if s.key in reader and reader.shape(s.key) != s.hf_shape]
    graphdef, state = nnx.split(model)
    flat = [(tuple(p), var) for p, var in nnx.to_flat_state(state)]
    if missing and not strict:
        values = {p: var.get_value() for p, var in flat}
        abstract = [s.key for s in missing if isinstance(values[s.path], jax.ShapeDtypeStruct)]
        if abstract:
            raise UserInputError(f"{where}: strict=False keeps the current value of a parameter without a tensor, but "
                             f"the model is abstract (no values) for: {_names(abstract)}")
    problems = list(misshaped) + _tied_twin_problems(reader, tied_twin, embed_spec)
    if strict:
        problems += [f"missing tensor {s.key!r} (shape {s.hf_shape})" for s in missing[:20]]
        if len(missing) > 20:
            problems.append(f"... and {len(missing) - 20} more missing tensors")
        if unexpected:
            problems.append(f"unexpected tensors (not parameters of this {model.cfg.family} model): {_names(unexpected)}")
    if problems:
        hint = " (pass strict=False to load a partial checkpoint on purpose)" if missing or unexpected else ""
        raise UserInputError(f"{where}: " + "; ".join(problems) + hint)
    if missing:
        warnings.warn(f"{where}: {len(missing)} parameters keep their current values (no tensor): "
                      f"{_names([s.key for s in missing])}", stacklevel=2)
    if unexpected:
        warnings.warn(f"{where}: {len(unexpected)} unexpected tensors skipped: {_names(unexpected)}", stacklevel=2)
    by_path = {s.path: s for s in specs}
    absent = {s.key for s in missing}
    loaded = []
    for p, var in flat:
        spec = by_path.get(p)
        if spec is None:
            raise UserInputError(f"internal: parameter {'.'.join(map(str, p))} has no HF tensor mapping")
        if spec.key in absent:
            value = var.get_value()
            if mesh is not None:
                value = jax.device_put(value, named_sharding(variable_axes(var), value.shape, mesh, rules))
            loaded.append((p, var.replace(value)))
            continue
        target = var.get_value()
        arr = np.asarray(spec.to_ours(reader.get(spec.key)))
        if arr.shape != tuple(target.shape):
            raise UserInputError(f"tensor {spec.key!r}: converts to shape {arr.shape}, parameter wants {target.shape}")
        arr = arr.astype(target.dtype)
        if mesh is not None:
            value = jax.device_put(arr, named_sharding(variable_axes(var), arr.shape, mesh, rules))
        else:
            value = jnp.asarray(arr)
        loaded.append((p, var.replace(value)))
        del arr
    return nnx.merge(graphdef, nnx.from_flat_state(loaded))


def from_pretrained(
    path: str | os.PathLike,
    dtype=jnp.float32,
    *,
    param_dtype=None,
    mesh: jax.sharding.Mesh | None = None,
    rules: Rules = LOGICAL_AXIS_RULES,
    strict: bool = True,
) -> QwenModel:
    """Load a local HF directory (Qwen2.5-VL, Qwen3-VL or Qwen3) as a :class:`QwenModel`.

    ``dtype`` is the compute dtype and, unless ``param_dtype`` is given, the parameter dtype. With ``mesh``, each
    parameter is placed by its logical axes through ``rules`` as it is read. Missing or unexpected tensors are an
    error naming them (:func:`load_weights`); ``strict=False`` (partial checkpoints on purpose) starts from a
    randomly initialised model (seed 0) whose parameters without a tensor keep their initial values. A missing or
    malformed ``config.json`` (:func:`load_config`) and missing or damaged weights files (``SafetensorsDir``) are a
    ``ValueError`` naming the file, before any tensor is read.
    """
    cfg = load_config(path)
    if strict:
        model = abstract_model(cfg, dtype=dtype, param_dtype=param_dtype)
    else:
        model = QwenModel(cfg, dtype=dtype, param_dtype=param_dtype, rngs=nnx.Rngs(0))
    return load_weights(model, path, mesh=mesh, rules=rules, strict=strict)


def export_layout(family: str) -> str:
    """The key layout transformers writes for ``family``."""
    return "nested" if family == "qwen3_vl" else "legacy"


def generation_config(cfg: ModelConfig) -> dict:
    """The ``generation_config.json`` of an export: ``config.json``'s bos / eos / pad token ids (the text config's
    for vision-language models, as transformers reads them), then the source directory's generation config when the
    model was loaded from one (``cfg.generation``: its stop ids and sampling defaults win, as in transformers)."""
    text = cfg.raw.get("text_config") or {}
    ids = {k: text.get(k, cfg.raw.get(k)) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    return {**{k: v for k, v in ids.items() if v is not None}, **(cfg.generation or {})}


def save_pretrained(model: QwenModel, path: str | os.PathLike, *, max_shard_bytes: int = 4 << 30) -> None:
    """Write ``model`` as an HF directory (``config.json``, ``generation_config.json`` (:func:`generation_config`)
    and safetensors, sharded with an index above ``max_shard_bytes``), one tensor gathered to the host at a time.

    The generation config is written as read, not through ``transformers.GenerationConfig.save_pretrained``: that
    refuses files transformers itself loads with a warning (e.g. a ``temperature`` without ``do_sample``), which would
    fail an export at the end of a training run."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    specs = tensor_specs(model, export_layout(model.cfg.family))
    state = dict((tuple(p), v) for p, v in nnx.to_flat_state(nnx.state(model)))
    entries = []
    for s in specs:
        entries.append((s.key, s.hf_shape, np.dtype(state[s.path].get_value().dtype)))
    by_key = {s.key: s for s in specs}

    def produce(key: str) -> np.ndarray:
        s = by_key[key]
        return s.to_hf(np.asarray(jax.device_get(state[s.path].get_value())))

    shards, size = [[]], 0
    for e in entries:
        n = int(np.prod(e[1], dtype=np.int64)) * e[2].itemsize
        if shards[-1] and size + n > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += n
    if len(shards) == 1:
        write_safetensors(os.path.join(path, SINGLE_FILE), shards[0], produce)
    else:
        weight_map = {}
        for i, shard in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(os.path.join(path, name), shard, produce)
            weight_map.update({e[0]: name for e in shard})
        total = sum(int(np.prod(e[1], dtype=np.int64)) * e[2].itemsize for e in entries)
        with open(os.path.join(path, INDEX_FILE), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    raw = dict(model.cfg.raw)
    raw["dtype"] = str(np.dtype(entries[0][2]).name) if entries else "float32"
    raw.pop("torch_dtype", None)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
    with open(os.path.join(path, GENERATION_FILE), "w") as f:
        json.dump(generation_config(model.cfg), f, indent=2)
