"""Qwen2.5-VL vision tower in Flax NNX (parity target: transformers' `Qwen2_5_VisionTransformerPretrainedModel`).

Pipeline for a packed sequence of N patches (several images / video frames one after another):
patch embed -> window permutation (reorder spatial-merge blocks so each attention window is one slot of
`window_patches` rows, edge windows padded) ->
`depth` pre-norm blocks (RMSNorm, fused-qkv attention with 2-D rotary, RMSNorm, SwiGLU MLP); blocks listed in
`fullatt_block_indexes` attend over the whole frame, the others only inside their slot (a reshape, no cross-window
scores) -> 2x2 patch merger
(RMSNorm, concat of the 4 patches of a merge block, MLP with exact GELU) -> inverse window permutation.

Usage (config: a plain dict such as config.json's "vision_config", or an HF config object; `to_dict()` is taken):

    tower = Qwen25VisionTower(hf_config.vision_config.to_dict(), rngs=nnx.Rngs(0))
    tower.load_hf_state({k.removeprefix("visual."): v for k, v in hf_state.items() if k.startswith("visual.")})
    merged = tower(pixel_values, grid_thw)                 # eager, grid_thw a host numpy array [num_images, 3]

    # jitted, one compile per bucket:
    n_pad = bucket_length(num_patches(grid_thw))           # from vision_common
    meta = tower.prepare(grid_thw, pad_to=n_pad)            # host numpy metadata, fixed shapes
    pv = pad_pixel_values(pixel_values, n_pad)
    merged = nnx.jit(lambda t, x, m: t(x, m))(tower, pv, meta)   # [n_pad / 4, out_hidden]; rows with
                                                                 # meta.merged_valid False are padding
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.errors import UserInputError
from jaxdrive.models import vision_common as vc


@dataclass(frozen=True)
class Qwen25VisionConfig(vc.VisionConfigMixin):
    """Qwen2.5-VL vision hyper-parameters; defaults are transformers' `Qwen2_5_VLVisionConfig` defaults."""

    depth: int = 32
    hidden_size: int = 3584
    hidden_act: str = "silu"
    intermediate_size: int = 3420
    num_heads: int = 16
    in_channels: int = 3
    patch_size: int = 14
    spatial_merge_size: int = 2
    temporal_patch_size: int = 2
    window_size: int = 112
    out_hidden_size: int = 3584
    fullatt_block_indexes: tuple[int, ...] = (7, 15, 23, 31)
    rope_theta: float = 10000.0

    @property
    def window_units(self) -> int:
        """Window side in merged tokens (transformers' `vit_merger_window_size`)."""
        return self.window_size // self.spatial_merge_size // self.patch_size

    @property
    def window_patches(self) -> int:
        """Patches in a full window (the slot length of the windowed layers)."""
        return self.window_units ** 2 * self.merge_unit


@struct.dataclass
class Qwen25VisionMeta:
    """Host-computed, fixed-shape metadata for one call (n = padded patch count, m = n / merge_size**2).

    The blocks run in *window-slot order*: windows one after another, each padded to the full window length
    `window_units**2 * merge_size**2` patches, so a windowed layer is a reshape to [slots, window] with no mask
    between windows (l = slots * window >= n rows; the extra rows are padding).
    patch_perm: slot row -> original patch index (padding rows: 0). merged_unperm: original merged-token index ->
    slot-order merged index. cos/sin: rotary tables [l, head_dim]. full_segments / window_segments: attention segment
    ids per slot row (-1 = padding). merged_valid: True for merged tokens of real patches.
    frame_block (static): when all frames have the same size, the slot rows of one frame (its windows; the slot
    count is then a multiple of the windows per frame), so full-attention layers attend in frame blocks instead of
    one masked [l, l] score matrix. windows_full (static): every window is full (image sides multiples of
    `window_size` pixels), so no block mixes real and padding rows and attention needs no mask.
    """

    patch_perm: Int[Array, " l"]
    merged_unperm: Int[Array, " m"]
    cos: Float[Array, "l head_dim"]
    sin: Float[Array, "l head_dim"]
    full_segments: Int[Array, " l"]
    window_segments: Int[Array, " l"]
    merged_valid: Bool[Array, " m"]
    frame_block: int | None = struct.field(pytree_node=False, default=None)
    windows_full: bool = struct.field(pytree_node=False, default=False)


def window_order(grid_thw: np.ndarray, cfg: Qwen25VisionConfig) -> tuple[np.ndarray, np.ndarray]:
    """Window permutation of merged tokens and the window lengths in patches.

    Each frame's merged-token grid (h/merge x w/merge) is tiled by windows of `window_units` x `window_units`
    (partial at the right/bottom edges), windows in row-major order, tokens row-major inside a window.
    Returns (merged token order int64 [M], window lengths in patches int64 [num_windows]).
    """
    ws, merge = cfg.window_units, cfg.spatial_merge_size
    order, lengths, offset = [], [], 0
    for t, h, w in grid_thw.tolist():
        gh, gw = h // merge, w // merge
        for frame in range(t):
            ids = offset + frame * gh * gw + np.arange(gh * gw).reshape(gh, gw)
            for r in range(0, gh, ws):
                for c in range(0, gw, ws):
                    block = ids[r:r + ws, c:c + ws].reshape(-1)
                    order.append(block)
                    lengths.append(block.size * cfg.merge_unit)
        offset += t * gh * gw
    return np.concatenate(order), np.asarray(lengths, dtype=np.int64)


def prepare_qwen25_vision_inputs(grid_thw, cfg: Qwen25VisionConfig, pad_to: int | None = None) -> Qwen25VisionMeta:
    """Host metadata for `Qwen25VisionTower.__call__` from grid_thw [num_images, 3] (t, h, w in patches).

    pad_to: static padded patch count (multiple of merge_size**2, >= sum(t*h*w)); None = no padding.
    The slot count is max(ceil(pad_to / window), number of windows): a function of pad_to alone whenever the
    windows tile the images exactly (image sides multiples of `window_size` pixels), so such mixes share a compile.
    """
    grid = vc.validate_grid_thw(grid_thw, cfg.spatial_merge_size)
    n = vc.num_patches(grid)
    n_pad = vc.resolve_pad_to(n, pad_to, cfg.merge_unit)
    u, window = cfg.merge_unit, cfg.window_patches
    merged_order, window_lengths = window_order(grid, cfg)
    slots = max(-(-n_pad // window), len(window_lengths))
    frame_block = None
    if vc.uniform_frame_patches(grid) is not None:  # frames of one size: a whole number of frames' windows
        gh, gw = grid[0, 1] // cfg.spatial_merge_size, grid[0, 2] // cfg.spatial_merge_size
        frame_windows = int(-(-gh // cfg.window_units) * -(-gw // cfg.window_units))
        slots = -(-slots // frame_windows) * frame_windows
        frame_block = frame_windows * window
    # slot row of every patch in window order, and the original patch it holds
    rows = np.concatenate([w * window + np.arange(length) for w, length in enumerate(window_lengths)])
    source = (merged_order[:, None] * u + np.arange(u)).reshape(-1)
    patch_perm = np.zeros(slots * window, np.int32)
    patch_perm[rows] = source

    def to_slots(values: np.ndarray, fill) -> np.ndarray:
        out = np.full((slots * window,) + values.shape[1:], fill, values.dtype)
        out[rows] = values[source]
        return out

    cos, sin = vc.rotary_tables(vc.patch_positions(grid, cfg.spatial_merge_size), cfg.head_dim, cfg.rope_theta)
    window_ids = np.repeat(np.arange(len(window_lengths), dtype=np.int32), window_lengths)
    window_segments = np.full(slots * window, -1, np.int32)
    window_segments[rows] = window_ids
    merged_unperm = np.zeros(n_pad // u, np.int32)
    merged_unperm[merged_order] = rows[::u] // u
    return Qwen25VisionMeta(
        patch_perm=patch_perm,
        merged_unperm=merged_unperm,
        cos=to_slots(cos, 0.0), sin=to_slots(sin, 0.0),
        full_segments=to_slots(vc.frame_segment_ids(grid), -1),
        window_segments=window_segments,
        merged_valid=vc.merged_valid_mask(n, n_pad, u),
        frame_block=frame_block,
        windows_full=bool((window_lengths == window).all()),
    )


class RMSNorm(nnx.Module):
    """x / sqrt(mean(x^2) + eps) * scale, statistics in float32 (transformers' Qwen2_5_VLRMSNorm)."""

    def __init__(self, dim: int, *, eps: float = 1e-6, dtype=jnp.float32, param_dtype=jnp.float32):
        self.scale = vc.param(jnp.ones((dim,), param_dtype), ("vision_embed",))
        self.eps, self.dtype = eps, dtype

    def __call__(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        xf = x.astype(jnp.float32)
        y = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)).astype(x.dtype)
        return (self.scale[...].astype(self.dtype) * y).astype(self.dtype)


class SwiGLU(nnx.Module):
    """down(act(gate(x)) * up(x)), all with bias."""

    def __init__(self, dim: int, hidden: int, act: str, *, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.gate_proj = vc.Dense(dim, hidden, ("vision_embed", "vision_mlp"), **kw)
        self.up_proj = vc.Dense(dim, hidden, ("vision_embed", "vision_mlp"), **kw)
        self.down_proj = vc.Dense(hidden, dim, ("vision_mlp", "vision_embed"), **kw)
        self.act = vc.activation(act)

    def __call__(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class Qwen25VisionBlock(nnx.Module):
    def __init__(self, cfg: Qwen25VisionConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        d = cfg.hidden_size
        self.norm1 = RMSNorm(d, dtype=dtype, param_dtype=param_dtype)
        self.norm2 = RMSNorm(d, dtype=dtype, param_dtype=param_dtype)
        self.attn = vc.VisionAttention(d, cfg.num_heads, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.mlp = SwiGLU(d, cfg.intermediate_size, cfg.hidden_act, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x: Float[Array, "n d"], cos: Float[Array, "n hd"], sin: Float[Array, "n hd"],
                 segments: Int[Array, " n"] | None, block: int | None = None) -> Float[Array, "n d"]:
        x = x + self.attn(self.norm1(x), cos, sin, segments, block)
        return x + self.mlp(self.norm2(x))


class Qwen25PatchMerger(nnx.Module):
    """RMSNorm per patch, concat the merge_size**2 patches of a block, Linear -> GELU(exact) -> Linear."""

    def __init__(self, cfg: Qwen25VisionConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        d_in = cfg.hidden_size * cfg.merge_unit
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.ln_q = RMSNorm(cfg.hidden_size, dtype=dtype, param_dtype=param_dtype)
        self.fc1 = vc.Dense(d_in, d_in, ("vision_embed", "vision_mlp"), **kw)
        self.fc2 = vc.Dense(d_in, cfg.out_hidden_size, ("vision_mlp", "vision_embed"), **kw)
        self.merge_unit = cfg.merge_unit

    def __call__(self, x: Float[Array, "n d"]) -> Float[Array, "m out"]:
        h = vc.merge_groups(self.ln_q(x), self.merge_unit)
        return self.fc2(vc.activation("gelu")(self.fc1(h)))


class Qwen25VisionTower(vc.HFTensorsMixin, nnx.Module):
    """Qwen2.5-VL vision encoder: pixel patches [N, C*T*P*P] -> merged embeddings [N / merge**2, out_hidden_size].

    config: HF vision config as a plain dict (config.json "vision_config") or an HF config object (its to_dict()
    is used). Computation runs in `dtype` (norms, rotary, softmax in float32); parameters are stored in
    `param_dtype` and carry logical axis names.
    """

    HF_NAME = "Qwen2.5-VL vision"

    def __init__(self, config, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        cfg = config if isinstance(config, Qwen25VisionConfig) else Qwen25VisionConfig.from_hf(config)
        if cfg.window_units < 1:
            raise UserInputError(f"vision config window_size: must be >= spatial_merge_size * patch_size = "
                             f"{cfg.spatial_merge_size * cfg.patch_size}, got {cfg.window_size}")
        bad = [i for i in cfg.fullatt_block_indexes if not 0 <= i < cfg.depth]
        if bad:
            raise UserInputError(f"vision config fullatt_block_indexes: {bad} outside [0, depth={cfg.depth})")
        self.config = cfg
        self.dtype = dtype
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.patch_embed = vc.PatchEmbed(cfg.patch_dim, cfg.hidden_size, bias=False, **kw)
        self.blocks = nnx.List([Qwen25VisionBlock(cfg, **kw) for _ in range(cfg.depth)])
        self.merger = Qwen25PatchMerger(cfg, **kw)

    def prepare(self, grid_thw, pad_to: int | None = None) -> Qwen25VisionMeta:
        """Host metadata for `__call__` (see `prepare_qwen25_vision_inputs`)."""
        return prepare_qwen25_vision_inputs(grid_thw, self.config, pad_to)

    def __call__(self, pixel_values: Float[Array, "n patch_dim"],
                 grid_or_meta) -> Float[Array, "m out_hidden"]:
        """pixel_values [N, C*T*P*P] with either grid_thw (host numpy [num_images, 3]: validated, unpadded, eager
        use) or a `Qwen25VisionMeta` from `prepare` (jittable; N must equal the meta's padded length).
        Returns merged embeddings [N / merge**2, out_hidden_size] in the original image/patch order."""
        meta = self._meta(pixel_values, grid_or_meta)
        cfg = self.config
        x = self.patch_embed(pixel_values)[meta.patch_perm]
        cos, sin = jnp.asarray(meta.cos), jnp.asarray(meta.sin)
        full_set = set(cfg.fullatt_block_indexes)
        window_segments = None if meta.windows_full else meta.window_segments
        full_segments = None if meta.windows_full and meta.frame_block else meta.full_segments
        for i, block in enumerate(self.blocks):
            if i in full_set:
                x = block(x, cos, sin, full_segments, meta.frame_block)
            else:
                x = block(x, cos, sin, window_segments, cfg.window_patches)
        return self.merger(x)[meta.merged_unperm]

    def _meta(self, pixel_values, grid_or_meta) -> Qwen25VisionMeta:
        if isinstance(grid_or_meta, Qwen25VisionMeta):
            n = grid_or_meta.merged_unperm.shape[0] * self.config.merge_unit
            if pixel_values.shape != (n, self.config.patch_dim):
                raise UserInputError(f"pixel_values: metadata was prepared for shape ({n}, {self.config.patch_dim}), "
                                 f"got {tuple(pixel_values.shape)}")
            return grid_or_meta
        grid = vc.validate_grid_thw(grid_or_meta, self.config.spatial_merge_size)
        vc.check_pixel_values(pixel_values, grid, self.config.patch_dim)
        return self.prepare(grid)

    def hf_tensor_table(self) -> list[vc.HFTensor]:
        return qwen25_hf_tensor_table(self.config)


def qwen25_hf_tensor_table(cfg: Qwen25VisionConfig) -> list[vc.HFTensor]:
    """Every HF tensor of the Qwen2.5-VL vision tower with its parameter path and layout conversion."""
    d, i, u = cfg.hidden_size, cfg.intermediate_size, cfg.merge_unit
    table = vc.patch_embed_tensors("patch_embed.proj", ("patch_embed",), d, cfg.in_channels,
                                   cfg.temporal_patch_size, cfg.patch_size, bias=False)
    for b in range(cfg.depth):
        pre, path = f"blocks.{b}", ("blocks", b)
        table += vc.norm_tensors(f"{pre}.norm1", path + ("norm1",), d, [("weight", "scale")])
        table += vc.norm_tensors(f"{pre}.norm2", path + ("norm2",), d, [("weight", "scale")])
        table += vc.attention_tensors(f"{pre}.attn", path + ("attn",), d, cfg.num_heads)
        table += vc.dense_tensors(f"{pre}.mlp.gate_proj", path + ("mlp", "gate_proj"), d, i)
        table += vc.dense_tensors(f"{pre}.mlp.up_proj", path + ("mlp", "up_proj"), d, i)
        table += vc.dense_tensors(f"{pre}.mlp.down_proj", path + ("mlp", "down_proj"), i, d)
    table += vc.norm_tensors("merger.ln_q", ("merger", "ln_q"), d, [("weight", "scale")])
    table += vc.dense_tensors("merger.mlp.0", ("merger", "fc1"), d * u, d * u)
    table += vc.dense_tensors("merger.mlp.2", ("merger", "fc2"), d * u, cfg.out_hidden_size)
    return table
