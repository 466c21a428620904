"""Qwen2.5 / Qwen3 text decoder in Flax NNX: RMSNorm, grouped-query attention with M-RoPE, SwiGLU, static KV cache.

Qwen2.5 layers have q/k/v biases; Qwen3 layers have per-head RMSNorm on q and k and no biases. Every parameter
carries logical axis names (``out_sharding`` metadata, see :mod:`jaxdrive.parallel`); activations are pinned with
:func:`jaxdrive.parallel.constrain`.

The KV cache is a static-shape pair ``k, v: [B, L, num_kv_heads, head_dim]`` per layer. A forward over ``S`` new
tokens writes them at slots ``[cache_index, cache_index + S)`` (the same slots for every row) and attends to every
slot ``<=`` its own that ``kv_mask`` marks valid; so left, right or no padding all work, and the rotary position of a
token is independent of its slot.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.errors import UserInputError
from jaxdrive.models.attention import masked_attention
from jaxdrive.models.config import TextConfig
from jaxdrive.models.rope import apply_rope
from jaxdrive.parallel import constrain

_INIT = jax.nn.initializers.normal(0.02)


def param(rngs: nnx.Rngs, shape: tuple[int, ...], axes: tuple[str | None, ...], dtype, init=_INIT) -> nnx.Param:
    """An ``nnx.Param`` with logical axis names (no eager sharding: meshes are applied by ``parallel``)."""
    return nnx.Param(init(rngs.params(), shape, dtype), out_sharding=axes, eager_sharding=False)


def linear(d_in: int, d_out: int, axes: tuple[str, str], *, bias: bool, dtype, param_dtype, rngs) -> nnx.Linear:
    """An ``nnx.Linear`` (``kernel: [in, out]``, the transpose of torch's ``weight``) with logical axis names."""
    return nnx.Linear(
        d_in,
        d_out,
        use_bias=bias,
        dtype=dtype,
        param_dtype=param_dtype,
        kernel_init=_INIT,
        kernel_metadata={"out_sharding": axes, "eager_sharding": False},
        bias_metadata={"out_sharding": (axes[1],), "eager_sharding": False},
        rngs=rngs,
    )


class RMSNorm(nnx.Module):
    """``weight * (x / sqrt(mean(x^2) + eps))`` with the statistics in float32 (as transformers)."""

    def __init__(self, dim: int, eps: float, *, param_dtype, rngs):
        self.weight = param(rngs, (dim,), ("norm",), param_dtype, jax.nn.initializers.ones)
        self.eps = eps

    def __call__(self, x: Array) -> Array:
        xf = x.astype(jnp.float32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return self.weight[...].astype(x.dtype) * xf.astype(x.dtype)


@dataclasses.dataclass(frozen=True)
class Rotary:
    """Per-token rotary tables shared by all layers: ``cos, sin: [B, S, head_dim]`` float32."""

    cos: Array
    sin: Array


jax.tree_util.register_dataclass(Rotary, data_fields=["cos", "sin"], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class LayerCache:
    """Static KV cache of one layer: ``k, v: [B, L, num_kv_heads, head_dim]``."""

    k: Array
    v: Array


jax.tree_util.register_dataclass(LayerCache, data_fields=["k", "v"], meta_fields=[])


def take_rows(a: Array, index: Int[Array, "B Q"]) -> Array:
    """``a [B, S, ...]`` at positions ``index [B, Q]`` of each row: ``[B, Q, ...]``."""
    return jnp.take_along_axis(a, index.reshape(index.shape + (1,) * (a.ndim - 2)), axis=1)


def attention_mask(
    q_slots: Int[Array, "S"], kv_mask: Bool[Array, "B L"]
) -> Bool[Array, "B S L"]:
    """Causal-by-slot mask: query at slot ``q`` sees valid key slots ``<= q``."""
    k_slots = jnp.arange(kv_mask.shape[1])
    return (k_slots[None, None, :] <= q_slots[None, :, None]) & kv_mask[:, None, :]


#: "auto": cuDNN's fused attention on GPU for bf16/fp16 (head_dim a multiple of 8, <= 128), the XLA kernel of
#: :mod:`jaxdrive.models.attention` otherwise; "xla": always the XLA kernel. Read at trace time.
ATTENTION_IMPLEMENTATION = "auto"


#: Query rows per causal chunk of a prefill / teacher-forced pass with a static ``cache_index`` on the XLA kernel
#: (0: one block). Chunk ``[a, b)`` attends to the key slots ``< cache_index + b`` only, skipping the upper triangle
#: of the score matrix in blocks: 3 chunks of 128 do 69% of the score work of one 310-token block.
QUERY_CHUNK = 128


def attention_implementation(dtype, head_dim: int) -> str:
    """"cudnn" or "xla" for attention in ``dtype`` with ``head_dim`` (see :data:`ATTENTION_IMPLEMENTATION`)."""
    if ATTENTION_IMPLEMENTATION not in ("auto", "xla"):
        raise UserInputError(f"ATTENTION_IMPLEMENTATION: expected 'auto' or 'xla', got {ATTENTION_IMPLEMENTATION!r}")
    fused_ok = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)) and head_dim % 8 == 0 and head_dim <= 128
    if ATTENTION_IMPLEMENTATION == "auto" and fused_ok and jax.default_backend() == "gpu":
        return "cudnn"
    return "xla"


def attend(
    q: Float[Array, "B S N D"], k: Float[Array, "B L K D"], v: Float[Array, "B L K D"], mask: Bool[Array, "B S L"]
) -> Float[Array, "B S N D"]:
    """Grouped-query attention of ``q`` over ``k, v`` where ``mask`` is True (scale ``D**-0.5``, float32 statistics)."""
    b, s, n, d = q.shape
    kv = k.shape[2]
    if attention_implementation(q.dtype, d) == "cudnn":
        return jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], implementation="cudnn")
    qh = q.reshape(b, s, kv, n // kv, d).transpose(0, 2, 3, 1, 4)  # [B, K, G, S, D]
    kh, vh = k.transpose(0, 2, 1, 3)[:, :, None], v.transpose(0, 2, 1, 3)[:, :, None]  # [B, K, 1, L, D]
    out = masked_attention(qh, kh, vh, mask[:, None, None], d**-0.5)
    return out.transpose(0, 3, 1, 2, 4).reshape(b, s, n, d)


class Attention(nnx.Module):
    """Grouped-query self-attention with rotary embeddings, optional q/k RMSNorm and a static KV cache."""

    def __init__(self, cfg: TextConfig, *, dtype, param_dtype, rngs):
        h, d = cfg.hidden_size, cfg.head_dim
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = linear(h, cfg.num_heads * d, ("embed", "heads"), bias=cfg.qkv_bias, **kw)
        self.k_proj = linear(h, cfg.num_kv_heads * d, ("embed", "kv_heads"), bias=cfg.qkv_bias, **kw)
        self.v_proj = linear(h, cfg.num_kv_heads * d, ("embed", "kv_heads"), bias=cfg.qkv_bias, **kw)
        self.o_proj = linear(cfg.num_heads * d, h, ("heads", "embed"), bias=cfg.o_bias, **kw)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps, param_dtype=param_dtype, rngs=rngs)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps, param_dtype=param_dtype, rngs=rngs)
        else:
            self.q_norm = self.k_norm = None
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.dtype = dtype

    def __call__(
        self,
        x: Float[Array, "B S H"],
        rotary: Rotary,
        mask: Bool[Array, "B S L"],
        cache: LayerCache | None,
        cache_index: Int[Array, ""] | int,
        query_index: Int[Array, "B Q"] | None = None,
    ) -> tuple[Float[Array, "B Q H"], LayerCache | None]:
        """Keys and values of all ``S`` tokens (written to ``cache``); queries and outputs only at ``query_index``
        (``Q`` positions per row; None: all ``S``). ``mask`` is ``[B, S, L]`` either way."""
        b, s, _ = x.shape
        cos, sin = rotary.cos, rotary.sin
        xq = x
        if query_index is not None:
            xq, cos_q, sin_q, mask = (take_rows(a, query_index) for a in (x, cos, sin, mask))
        q = self.q_proj(xq).reshape(b, xq.shape[1], self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, *((cos, sin) if query_index is None else (cos_q, sin_q)))
        k = apply_rope(k, cos, sin)
        q = constrain(q, ("batch", "seq", "act_heads", None))
        if cache is not None:
            k = jax.lax.dynamic_update_slice(cache.k, k.astype(cache.k.dtype), (0, cache_index, 0, 0))
            v = jax.lax.dynamic_update_slice(cache.v, v.astype(cache.v.dtype), (0, cache_index, 0, 0))
            k = constrain(k, ("batch", "cache_seq", "act_kv_heads", None))
            v = constrain(v, ("batch", "cache_seq", "act_kv_heads", None))
            cache = LayerCache(k, v)
            if isinstance(cache_index, int):  # static: only slots before cache_index + s can be visible
                k, v = k[:, : cache_index + s], v[:, : cache_index + s]
        k, v, mask = k.astype(q.dtype), v.astype(q.dtype), mask[..., : k.shape[1]]
        chunk = QUERY_CHUNK
        if query_index is None and isinstance(cache_index, int) and chunk and s > chunk \
                and attention_implementation(q.dtype, self.head_dim) == "xla":
            # causal: queries [a, b) see no slot after cache_index + b, so each chunk of queries attends to the
            # keys up to its own end only (the masked scores it skips are exact zeros after the softmax)
            ends = [min(a + chunk, s) for a in range(0, s, chunk)]
            out = jnp.concatenate([attend(q[:, a:e], k[:, : cache_index + e], v[:, : cache_index + e],
                                          mask[:, a:e, : cache_index + e]) for a, e in zip(range(0, s, chunk), ends)],
                                  axis=1)
        else:
            out = attend(q, k, v, mask)
        out = out.reshape(b, q.shape[1], self.num_heads * self.head_dim).astype(self.dtype)
        return self.o_proj(out), cache


class MLP(nnx.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: TextConfig, *, dtype, param_dtype, rngs):
        kw = dict(bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.gate_proj = linear(cfg.hidden_size, cfg.intermediate_size, ("embed", "mlp"), **kw)
        self.up_proj = linear(cfg.hidden_size, cfg.intermediate_size, ("embed", "mlp"), **kw)
        self.down_proj = linear(cfg.intermediate_size, cfg.hidden_size, ("mlp", "embed"), **kw)

    def __call__(self, x: Array) -> Array:
        h = jax.nn.silu(self.gate_proj(x)) * self.up_proj(x)
        return self.down_proj(constrain(h, ("batch", "seq", "act_mlp")))


class DecoderLayer(nnx.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(self, cfg: TextConfig, *, dtype, param_dtype, rngs):
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype, rngs=rngs)
        self.self_attn = Attention(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype, rngs=rngs)
        self.mlp = MLP(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x, rotary: Rotary, mask, cache: LayerCache | None, cache_index, query_index=None):
        """Outputs at ``query_index [B, Q]`` only when given (the cache still receives every token's k/v)."""
        h, cache = self.self_attn(self.input_layernorm(x), rotary, mask, cache, cache_index, query_index)
        x = (x if query_index is None else take_rows(x, query_index)) + h
        x = x + self.mlp(self.post_attention_layernorm(x))
        return constrain(x, ("batch", "seq", "act_embed")), cache


class TextModel(nnx.Module):
    """Token embedding, decoder layers and final norm (transformers' ``...TextModel``)."""

    def __init__(self, cfg: TextConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        self.embed_tokens = nnx.Embed(
            cfg.vocab_size,
            cfg.hidden_size,
            dtype=dtype,
            param_dtype=param_dtype,
            embedding_init=_INIT,
            embedding_metadata={"out_sharding": ("vocab", "embed"), "eager_sharding": False},
            rngs=rngs,
        )
        self.layers = nnx.List(
            [DecoderLayer(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs) for _ in range(cfg.num_layers)]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=param_dtype, rngs=rngs)
        self.cfg = cfg
        self.dtype = dtype

    def init_cache(self, batch: int, length: int, dtype=None) -> list[LayerCache]:
        """Zeroed static caches for ``batch`` rows of ``length`` slots."""
        shape = (batch, length, self.cfg.num_kv_heads, self.cfg.head_dim)
        dtype = dtype or self.dtype
        return [LayerCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(self.cfg.num_layers)]
