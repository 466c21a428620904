"""Rotary position embeddings: 1-D RoPE, M-RoPE (Qwen2.5-VL chunked, Qwen3-VL interleaved) and 3-D position ids.

Position ids are ``[3, B, S]`` integers (temporal, height, width); text tokens carry the same value in all three.
They are computed on the host from the whole prompt (:func:`get_rope_index`, the algorithm of transformers'
``get_rope_index``), together with a per-sequence ``rope_delta`` so that a token appended after the prompt at valid
index ``n`` (0-based count of the sequence's valid tokens before it) has position ``n + rope_delta`` in all three
axes. Decode and teacher-forced passes both use this rule, so sampler and trainer agree.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jaxdrive.errors import UserInputError


def inv_frequencies(head_dim: int, theta: float) -> np.ndarray:
    """``[head_dim // 2]`` float32 inverse frequencies ``theta ** (-2i / head_dim)`` (float32 like transformers)."""
    exponent = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / (np.float32(theta) ** exponent)).astype(np.float32)


def mrope_axis_map(half_dim: int, section: tuple[int, int, int] | None, interleaved: bool) -> np.ndarray:
    """``[half_dim]`` int: which position axis (0=t, 1=h, 2=w) drives each rotary frequency.

    Qwen2.5-VL (chunked): the first ``section[0]`` frequencies follow t, the next ``section[1]`` h, the rest w.
    Qwen3-VL (interleaved): frequency ``j`` follows h if ``j % 3 == 1 and j < 3*section[1]``, w if
    ``j % 3 == 2 and j < 3*section[2]``, else t. ``section=None`` (1-D RoPE): all follow axis 0.
    """
    axis = np.zeros(half_dim, dtype=np.int32)
    if section is None:
        return axis
    if interleaved:
        j = np.arange(half_dim)
        axis[(j % 3 == 1) & (j < 3 * section[1])] = 1
        axis[(j % 3 == 2) & (j < 3 * section[2])] = 2
    else:
        axis[section[0] : section[0] + section[1]] = 1
        axis[section[0] + section[1] :] = 2
    return axis


def rope_cos_sin(
    positions: Int[Array, "3 B S"], inv_freq: np.ndarray, axis_map: np.ndarray
) -> tuple[Float[Array, "B S D"], Float[Array, "B S D"]]:
    """cos/sin tables ``[B, S, head_dim]`` (float32) for 3-D ``positions``; ``D = 2 * len(inv_freq)``."""
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [3, B, S, D/2]
    am = jnp.asarray(axis_map)
    freqs = jnp.where(am == 0, freqs[0], jnp.where(am == 1, freqs[1], freqs[2]))
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: Float[Array, "B S N D"], cos: Float[Array, "B S D"], sin: Float[Array, "B S D"]) -> Array:
    """Rotate ``x`` (heads on axis 2) by the tables; the rotation runs in float32 and returns ``x.dtype``."""
    xf = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    out = xf * cos[:, :, None, :] + rotated * sin[:, :, None, :]
    return out.astype(x.dtype)


def get_rope_index(
    input_ids: np.ndarray,
    attention_mask: np.ndarray | None = None,
    image_grid_thw: np.ndarray | None = None,
    spatial_merge_size: int = 2,
    *,
    image_token_id: int | None = None,
    image_mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """3-D position ids ``[3, B, S]`` (int32) and rope deltas ``[B]`` (int32) for a batch of prompts.

    Image slots are ``image_mask`` (bool [B, S]) if given, else the tokens equal to ``image_token_id``.
    Valid text tokens get consecutive positions. Each image (a run of ``grid_t*grid_h*grid_w/merge^2`` image-pad
    tokens; images are consumed in order across the batch, row by row) at current position ``p`` gets
    ``t = p + frame``, ``h = p + row``, ``w = p + col`` on the merged grid, and the text after it resumes at
    ``p + max(grid_h, grid_w) / merge``. Padding (``attention_mask == 0``) gets position 0 and is skipped.
    ``rope_delta = max_position + 1 - num_valid_tokens``.
    """
    input_ids = np.asarray(input_ids)
    if input_ids.ndim != 2:
        raise UserInputError(f"get_rope_index: input_ids must be [B, S], got shape {input_ids.shape}")
    b, s = input_ids.shape
    mask = np.ones((b, s), bool) if attention_mask is None else np.asarray(attention_mask).astype(bool)
    if mask.shape != (b, s):
        raise UserInputError(f"get_rope_index: attention_mask must have shape {(b, s)}, got {mask.shape}")
    if image_mask is None:
        image_mask = input_ids == image_token_id if image_token_id is not None else np.zeros((b, s), bool)
    image_mask = np.asarray(image_mask, bool)
    grids = [] if image_grid_thw is None else [tuple(int(v) for v in g) for g in np.asarray(image_grid_thw)]
    next_image = 0
    positions = np.zeros((3, b, s), np.int32)
    deltas = np.zeros((b,), np.int32)
    m2 = spatial_merge_size * spatial_merge_size
    for row in range(b):
        ids = input_ids[row][mask[row]]
        is_img = image_mask[row][mask[row]]
        pos = np.zeros((3, len(ids)), np.int64)
        cur, i = 0, 0
        while i < len(ids):
            if not is_img[i]:
                pos[:, i] = cur
                cur += 1
                i += 1
                continue
            if next_image >= len(grids):
                raise UserInputError(
                    f"get_rope_index: row {row} has more image-pad tokens than images in image_grid_thw "
                    f"({len(grids)} images)"
                )
            t, h, w = grids[next_image]
            next_image += 1
            hm, wm = h // spatial_merge_size, w // spatial_merge_size
            n = t * h * w // m2
            if i + n > len(ids) or not is_img[i : i + n].all():
                raise UserInputError(
                    f"get_rope_index: image {next_image - 1} with grid {(t, h, w)} needs {n} consecutive image-pad "
                    f"tokens in row {row} at valid index {i}"
                )
            tt, hh, ww = np.meshgrid(np.arange(t), np.arange(hm), np.arange(wm), indexing="ij")
            pos[:, i : i + n] = np.stack([tt.ravel(), hh.ravel(), ww.ravel()]) + cur
            cur += max(h, w) // spatial_merge_size
            i += n
        positions[:, row, mask[row]] = pos
        deltas[row] = (pos.max() + 1 - len(ids)) if len(ids) else 0
    if next_image != len(grids):
        raise UserInputError(
            f"get_rope_index: image_grid_thw has {len(grids)} images but the prompts hold image-pad tokens for "
            f"{next_image}"
        )
    return positions, deltas
