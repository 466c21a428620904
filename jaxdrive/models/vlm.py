"""The full Qwen model (Qwen2.5-VL, Qwen3-VL, or Qwen3 text-only) in Flax NNX.

``embed tokens -> splice the vision tower's embeddings at image-pad tokens -> decoder layers (Qwen3-VL: DeepStack
features added to the image positions after each of the first layers) -> final RMSNorm -> lm_head`` (tied to the
embedding when ``tie_word_embeddings``).

Two levels of API:

* host convenience (numpy in, eager validation): ``model(input_ids, attention_mask, pixel_values, image_grid_thw)``
  -> logits ``[B, S, V]`` and :meth:`QwenModel.hidden_states` -> ``[B, S, H]``; both prepare the inputs on the host
  (:meth:`QwenModel.prepare_inputs`) and run a jitted body.
* traceable (inside a training step's jit / grad): :meth:`QwenModel.forward_hidden` on a :class:`ModelInputs`
  prepared once on the host, and :meth:`QwenModel.lm_head_weight` for chunked log-probs that never build
  ``[B, S, V]``.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.errors import UserInputError
from jaxdrive.models.config import ModelConfig
from jaxdrive.models.decoder import LayerCache, Rotary, TextModel, attention_mask, linear, take_rows
from jaxdrive.models.lora import LoRALinear
from jaxdrive.models.vision_common import uniform_frame_patches
from jaxdrive.models.rope import get_rope_index, inv_frequencies, mrope_axis_map, rope_cos_sin
from jaxdrive.parallel import constrain


@dataclasses.dataclass(frozen=True)
class ModelInputs:
    """Device-ready inputs of one forward pass (a pytree; build with :meth:`QwenModel.prepare_inputs`).

    input_ids: int32 [B, S]. attention_mask: bool [B, S] (False = padding). positions: int32 [3, B, S] rotary
    position ids (t, h, w). rope_deltas: int32 [B] (position of a token appended after valid index ``n`` is
    ``n + rope_delta``). image_mask: bool [B, S], the slots that receive image embeddings (or None: no images).
    pixel_values: [N_pad, C*T*P*P] flattened patches padded to a bucket, or None. vision_meta: the tower's host
    metadata for those patches (a pytree of arrays), or None.
    """

    input_ids: Int[Array, "B S"]
    attention_mask: Bool[Array, "B S"]
    positions: Int[Array, "3 B S"]
    rope_deltas: Int[Array, "B"]
    image_mask: Any = None
    pixel_values: Any = None
    vision_meta: Any = None


jax.tree_util.register_dataclass(
    ModelInputs,
    data_fields=["input_ids", "attention_mask", "positions", "rope_deltas", "image_mask", "pixel_values", "vision_meta"],
    meta_fields=[],
)


def vision_tower_class(family: str):
    """The vision tower class of ``family`` (None for text-only families).

    Import errors propagate: a VL model is never built without its vision tower."""
    if family == "qwen2_5_vl":
        from jaxdrive.models.vision_qwen25 import Qwen25VisionTower

        return Qwen25VisionTower
    if family == "qwen3_vl":
        from jaxdrive.models.vision_qwen3 import Qwen3VisionTower

        return Qwen3VisionTower
    return None


class QwenModel(nnx.Module):
    """Qwen2.5-VL / Qwen3-VL / Qwen3 causal LM. See the module docstring for the call paths.

    Attributes: ``language_model`` (:class:`TextModel`), ``visual`` (vision tower or None), ``lm_head``
    (``nnx.Linear`` [H, V] or None when tied).
    """

    def __init__(self, cfg: ModelConfig, *, dtype=jnp.float32, param_dtype=None, rngs: nnx.Rngs):
        param_dtype = param_dtype or dtype
        self.cfg = cfg
        self.dtype = dtype
        self.language_model = TextModel(cfg.text, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        tower = vision_tower_class(cfg.family) if cfg.has_vision else None
        self.visual = tower(cfg.vision, dtype=dtype, param_dtype=param_dtype, rngs=rngs) if tower else None
        t = cfg.text
        self.lm_head = (
            None
            if t.tie_word_embeddings
            else linear(
                t.hidden_size, t.vocab_size, ("embed", "vocab"), bias=False, dtype=dtype, param_dtype=param_dtype,
                rngs=rngs,
            )
        )

    # ------------------------------------------------------------------ host side
    def prepare_inputs(
        self,
        input_ids,
        attention_mask=None,
        pixel_values=None,
        image_grid_thw=None,
        *,
        image_mask=None,
        bucket: int = 256,
    ) -> ModelInputs:
        """Validate on the host and build :class:`ModelInputs` (3-D positions from the whole prompt, padded patches).

        input_ids: int [B, S]; attention_mask: [B, S] (1 = token, 0 = padding; default all ones);
        pixel_values: [N, C*T*P*P] as transformers' processor gives; image_grid_thw: int [num_images, 3].
        image_mask: bool [B, S], the image slots (default: valid tokens equal to the image-pad id; pass it to keep
        a sampled completion that happens to contain that id from counting as image slots).
        Patches are padded to a multiple of ``bucket`` so prompts with similar image sizes share one compile, except
        when every frame has the same size of at least ``bucket`` patches: then they are not padded (the shape is a
        function of the frame count and size anyway), and the vision tower attends per frame, with no padded rows.
        """
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise UserInputError(f"input_ids: expected an int array [B, S], got dtype {ids.dtype} shape {ids.shape}")
        mask = np.ones(ids.shape, bool) if attention_mask is None else np.asarray(attention_mask).astype(bool)
        if mask.shape != ids.shape:
            raise UserInputError(f"attention_mask: expected shape {ids.shape} (as input_ids), got {mask.shape}")
        v = self.cfg.text.vocab_size
        if ids[mask].size and (ids[mask].min() < 0 or ids[mask].max() >= v):
            raise UserInputError(f"input_ids: token ids must be in [0, {v}), got range [{ids[mask].min()}, {ids[mask].max()}]")
        if (pixel_values is None) != (image_grid_thw is None):
            raise UserInputError("pixel_values and image_grid_thw must be given together")
        grid = None
        pv = meta = img = None
        if pixel_values is not None:
            if self.visual is None:
                raise UserInputError(f"pixel_values given but this {self.cfg.family} model has no vision tower")
            grid = np.asarray(image_grid_thw).astype(np.int64).reshape(-1, 3)
            m2 = self.cfg.spatial_merge_size**2
            n_tokens = int((grid.prod(-1) // m2).sum())
            img = (ids == self.cfg.image_token_id) & mask if image_mask is None else np.asarray(image_mask, bool) & mask
            if img.shape != ids.shape:
                raise UserInputError(f"image_mask: expected shape {ids.shape} (as input_ids), got {img.shape}")
            n_found = int(img.sum())
            if n_tokens != n_found:
                raise UserInputError(
                    f"input_ids: {n_found} image-pad tokens (id {self.cfg.image_token_id}) but image_grid_thw "
                    f"needs {n_tokens}"
                )
            pv = np.asarray(pixel_values)
            n = int(grid.prod(-1).sum())
            if pv.ndim != 2 or pv.shape[0] != n:
                raise UserInputError(f"pixel_values: expected [{n}, C*T*P*P] for image_grid_thw {grid.tolist()}, got {pv.shape}")
            frame = uniform_frame_patches(grid)
            n_pad = n if frame is not None and frame >= bucket else -(-n // bucket) * bucket
            meta = self.visual.prepare(grid, pad_to=n_pad)
            pv = np.concatenate([pv, np.zeros((n_pad - n, pv.shape[1]), pv.dtype)])
            pv = jnp.asarray(pv, self.dtype)
        positions, deltas = get_rope_index(ids, mask, grid, self.cfg.spatial_merge_size, image_mask=img)
        return ModelInputs(
            jnp.asarray(ids, jnp.int32),
            jnp.asarray(mask),
            jnp.asarray(positions),
            jnp.asarray(deltas),
            None if img is None else jnp.asarray(img),
            pv,
            meta,
        )

    def __call__(self, input_ids, attention_mask=None, pixel_values=None, image_grid_thw=None) -> Float[Array, "B S V"]:
        """Logits ``[B, S, V]`` (float32) for the arrays transformers' processor produces."""
        return _jit_logits(self, self.prepare_inputs(input_ids, attention_mask, pixel_values, image_grid_thw))

    def hidden_states(
        self, input_ids, attention_mask=None, pixel_values=None, image_grid_thw=None, *, image_mask=None
    ) -> Float[Array, "B S H"]:
        """Final (normed) hidden states ``[B, S, H]``; pair with :meth:`lm_head_weight` for chunked log-probs."""
        inputs = self.prepare_inputs(input_ids, attention_mask, pixel_values, image_grid_thw, image_mask=image_mask)
        return _jit_hidden(self, inputs)

    # ------------------------------------------------------------------ traceable
    def lm_head_weight(self) -> Float[Array, "H V"]:
        """The output projection ``[H, V]`` (the transposed embedding table when tied): ``logits = h @ W``.

        A LoRA adapter on ``lm_head`` is included (``LoRALinear.effective_kernel``, without its input dropout), so
        the logits, the sampler and the chunked log-probs all see it."""
        if self.lm_head is None:
            return self.language_model.embed_tokens.embedding[...].T
        if isinstance(self.lm_head, LoRALinear):
            return self.lm_head.effective_kernel()
        return self.lm_head.kernel[...]

    def logits(self, hidden: Float[Array, "B S H"]) -> Float[Array, "B S V"]:
        """``hidden @ lm_head`` in float32 accumulation; returns float32."""
        w = self.lm_head_weight()
        out = jnp.dot(hidden.astype(self.dtype), w.astype(self.dtype), preferred_element_type=jnp.float32)
        return constrain(out, ("batch", "seq", "act_vocab"))

    def rotary(self, positions: Int[Array, "3 B S"]) -> Rotary:
        """Rotary tables for ``positions`` (shared by all layers)."""
        t = self.cfg.text
        inv_freq = inv_frequencies(t.head_dim, t.rope_theta)
        axis_map = mrope_axis_map(t.head_dim // 2, t.mrope_section, t.mrope_interleaved)
        return Rotary(*rope_cos_sin(positions, inv_freq, axis_map))

    def embed(self, inputs: ModelInputs) -> tuple[Float[Array, "B S H"], list[Array]]:
        """Token embeddings with image embeddings spliced in, and the DeepStack additions (``[B, S, H]`` each)."""
        x = self.language_model.embed_tokens(inputs.input_ids).astype(self.dtype)
        if inputs.pixel_values is None:
            return x, []
        out = self.visual(inputs.pixel_values, inputs.vision_meta)
        feats, deep = (out[0], list(out[1])) if isinstance(out, tuple) else (out, [])
        b, s, h = x.shape
        is_img = inputs.image_mask.reshape(-1)
        idx = jnp.clip(jnp.cumsum(is_img) - 1, 0, feats.shape[0] - 1)

        def scatter(f):
            return jnp.where(is_img[:, None], f[idx].astype(self.dtype), 0).reshape(b, s, h)

        x = jnp.where(is_img.reshape(b, s, 1), scatter(feats), x)
        return x, [scatter(f) for f in deep]

    def forward_hidden(
        self,
        inputs: ModelInputs,
        *,
        cache: list[LayerCache] | None = None,
        kv_mask: Bool[Array, "B L"] | None = None,
        cache_index: Int[Array, ""] | int = 0,
        return_layers: bool = False,
        query_index: Int[Array, "B Q"] | None = None,
    ):
        """Decoder pass; returns ``(hidden [B, S, H] after the final norm, cache, layers)``.

        Without ``cache`` the tokens attend causally among themselves (``kv_mask`` defaults to the attention mask).
        With a cache of ``L`` slots, the ``S`` tokens are written at slots ``cache_index + [0, S)`` and attend to
        the slots ``kv_mask [B, L]`` marks valid (which must include their own). ``layers`` is the list
        ``[embeddings, layer 0 output, ..., layer N-1 output]`` (before any DeepStack addition, as transformers records
        them) when ``return_layers`` (debugging parity), else None.

        ``query_index [B, Q]``: return the hidden states of these positions only, ``[B, Q, H]`` (e.g. each row's last
        prompt token for the first generated token, or the judge's answer slots). The last layer then computes its
        queries, attention output and MLP at those positions alone (every position's keys and values still enter the
        cache): the same values, one layer's worth of work less on the other positions.
        """
        if query_index is not None and return_layers:
            raise UserInputError("forward_hidden: query_index and return_layers cannot be combined")
        x, deep = self.embed(inputs)
        x = constrain(x, ("batch", "seq", "act_embed"))
        s = x.shape[1]
        kv_mask = inputs.attention_mask if kv_mask is None else kv_mask
        mask = attention_mask(cache_index + jnp.arange(s), kv_mask)
        rot = self.rotary(inputs.positions)
        layers = [x] if return_layers else None
        new_cache = [] if cache is not None else None
        last = len(self.language_model.layers) - 1
        for i, layer in enumerate(self.language_model.layers):
            rows = query_index if i == last else None
            x, c = layer(x, rot, mask, cache[i] if cache is not None else None, cache_index, rows)
            if cache is not None:
                new_cache.append(c)
            if return_layers:
                layers.append(x)
            if i < len(deep):
                x = x + (deep[i] if rows is None else take_rows(deep[i], rows))
        if query_index is not None and last < 0:  # no layers: nothing was narrowed
            x = take_rows(x, query_index)
        return self.language_model.norm(x), new_cache, layers


def model_jit(fn, static_argnames: tuple[str, ...] = ()):
    """``fn(model, *args, **kwargs)`` compiled with ``jax.jit``, the model passed as a static graph definition plus its
    state (split on every call, so updated weights are always used; ``fn`` must not mutate the model).

    The host-convenience calls use this instead of ``nnx.jit``, whose per-call graph bookkeeping costs more than
    100 ms of Python on a model with a few hundred parameters, on the order of a whole CPU prefill.
    """

    @functools.partial(jax.jit, static_argnums=0, static_argnames=static_argnames)
    def jitted(graphdef, state, *args, **kwargs):
        return fn(nnx.merge(graphdef, state), *args, **kwargs)

    @functools.wraps(fn)
    def call(model, *args, **kwargs):
        graphdef, state = nnx.split(model)
        return jitted(graphdef, state, *args, **kwargs)

    return call


def _hidden(model: QwenModel, inputs: ModelInputs) -> Array:
    return model.forward_hidden(inputs)[0]


def _logits(model: QwenModel, inputs: ModelInputs) -> Array:
    return model.logits(model.forward_hidden(inputs)[0])


_jit_hidden = model_jit(_hidden)
_jit_logits = model_jit(_logits)
