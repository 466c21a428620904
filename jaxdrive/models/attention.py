"""The masked softmax-attention kernel shared by the text decoder and the vision towers (XLA path).

Heads-major layout so both matmuls are plain batched GEMMs, scores and softmax statistics in float32, and the softmax
normalisation deferred until after the ``probs @ v`` matmul (``out = (exp(s - max) @ v) / sum(exp(s - max))``): that
divides ``[.., Q, D]`` instead of ``[.., Q, L]`` and saves one full pass over the score matrix, which is what an
un-fused masked softmax costs on CPU. Every query row must see at least one key (callers guarantee it: causal rows
see themselves, padding rows see other padding rows), so no row divides by zero. ``mask=None`` means every query
sees every key: the select over the score matrix is skipped (callers pass it when the layout already holds exactly
the keys each query may see, e.g. one image per attention block).

On GPU the text decoder routes bf16/fp16 attention to cuDNN's fused kernel instead (:mod:`jaxdrive.models.decoder`).
"""
from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float


def masked_attention(
    q: Float[Array, "*B Q D"], k: Float[Array, "*B L D"], v: Float[Array, "*B L D"],
    mask: Bool[Array, "*B Q L"] | None, scale: float,
) -> Float[Array, "*B Q D"]:
    """``softmax(q k^T * scale, masked) v`` over the trailing two axes; leading axes batch (``mask`` broadcasts;
    None: no mask).

    Inputs in the compute dtype; the matmuls accumulate in float32, the result has ``v.dtype``.
    """
    q = (q.astype(jnp.float32) * scale).astype(q.dtype)  # scaling q, not the scores: [.., Q, D] instead of [.., Q, L]
    scores = jnp.einsum("...qd,...kd->...qk", q, k, preferred_element_type=jnp.float32)
    if mask is not None:
        scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    peak = jnp.max(scores, axis=-1, keepdims=True)
    weights = jnp.exp(scores - peak)
    total = jnp.sum(weights, axis=-1, keepdims=True)
    out = jnp.einsum("...qk,...kd->...qd", weights.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return (out / total).astype(v.dtype)
