"""Qwen3-VL vision tower in Flax NNX (parity target: transformers' `Qwen3VLVisionModel`).

Pipeline for a packed sequence of N patches (several images / video frames one after another):
patch embed (with bias) + learned position embedding (a square `num_position_embeddings` table resampled bilinearly,
align_corners=True, to each image's patch grid) -> `depth` pre-norm blocks (LayerNorm, fused-qkv attention with 2-D
rotary over the whole frame, LayerNorm, Linear-GELU(tanh)-Linear MLP) -> 2x2 patch merger. After each block listed in
`deepstack_visual_indexes` a DeepStack merger (LayerNorm applied *after* concatenating the 4 patches) turns the hidden
states into an extra feature map that the text decoder adds into its first layers.

Usage (config: a plain dict such as config.json's "vision_config", or an HF config object; `to_dict()` is taken):

    tower = Qwen3VisionTower(hf_config.vision_config.to_dict(), rngs=nnx.Rngs(0))
    tower.load_hf_state({k.removeprefix("model.visual."): v for k, v in hf_state.items()
                         if k.startswith("model.visual.")})
    merged, deepstack = tower(pixel_values, grid_thw)       # eager; grid_thw a host numpy array [num_images, 3]

    # jitted, one compile per bucket:
    n_pad = bucket_length(num_patches(grid_thw))            # from vision_common
    meta = tower.prepare(grid_thw, pad_to=n_pad)
    merged, deepstack = nnx.jit(lambda t, x, m: t(x, m))(tower, pad_pixel_values(pixel_values, n_pad), meta)
    # merged [n_pad / 4, out_hidden]; deepstack: list of [n_pad / 4, out_hidden]; meta.merged_valid marks real rows
"""
from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.errors import UserInputError
from jaxdrive.models import vision_common as vc


@dataclass(frozen=True)
class Qwen3VisionConfig(vc.VisionConfigMixin):
    """Qwen3-VL vision hyper-parameters; defaults are transformers' `Qwen3VLVisionConfig` defaults."""

    depth: int = 27
    hidden_size: int = 1152
    hidden_act: str = "gelu_pytorch_tanh"
    intermediate_size: int = 4304
    num_heads: int = 16
    in_channels: int = 3
    patch_size: int = 16
    spatial_merge_size: int = 2
    temporal_patch_size: int = 2
    out_hidden_size: int = 3584
    num_position_embeddings: int = 2304
    deepstack_visual_indexes: tuple[int, ...] = (8, 16, 24)
    rope_theta: float = 10000.0

    @property
    def grid_side(self) -> int:
        """Side of the square learned position grid (int(sqrt(num_position_embeddings)), as transformers)."""
        return int(self.num_position_embeddings ** 0.5)


@struct.dataclass
class Qwen3VisionMeta:
    """Host-computed, fixed-shape metadata for one call (n = padded patch count, m = n / merge_size**2).

    cos/sin: rotary tables [n, head_dim]. segments: full-attention segment id per patch (-1 = padding).
    pos_index / pos_weight: the 4 bilinear taps into the flattened position table and their weights (padding rows
    have weight 0). merged_valid: True for merged tokens of real patches.
    frame_block (static): the patch count of one frame when all frames have the same size and n is a multiple of
    it; the blocks then attend in [n / frame_block, frame_block] blocks, unmasked (each block is one frame or all
    padding), instead of one masked [n, n] score matrix per head. None: masked full attention.
    """

    cos: Float[Array, "n head_dim"]
    sin: Float[Array, "n head_dim"]
    segments: Int[Array, " n"]
    pos_index: Int[Array, "n 4"]
    pos_weight: Float[Array, "n 4"]
    merged_valid: Bool[Array, " m"]
    frame_block: int | None = struct.field(pytree_node=False, default=None)


def _axis_taps(index: np.ndarray, size: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Bilinear align_corners=True taps (floor, floor+1, clamped to the border) and weights along one axis.

    Source coordinate index * (side-1) / max(size-1, 1), computed in float32 like transformers."""
    src = index.astype(np.float32) * np.float32(side - 1) / np.maximum(size - 1, 1).astype(np.float32)
    floor = np.floor(src)
    offsets = np.arange(2)
    taps = np.clip(floor.astype(np.int64)[:, None] + offsets, 0, side - 1)
    weights = np.clip(1 - np.abs(src[:, None] - floor[:, None] - offsets), 0, None).astype(np.float32)
    return taps, weights


def position_embedding_taps(grid_thw: np.ndarray, cfg: Qwen3VisionConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per-patch bilinear taps (int64 [N, 4]) and weights (float32 [N, 4]) into the flattened [side*side] table.

    Equals F.interpolate(table as [D, side, side], size=(h, w), mode="bilinear", align_corners=True) read at each
    patch's (row, col), with patches in block-major order (transformers' `fast_pos_embed_interpolate`)."""
    positions = vc.patch_positions(grid_thw, cfg.spatial_merge_size)
    counts = np.prod(grid_thw, axis=1)
    heights, widths = np.repeat(grid_thw[:, 1], counts), np.repeat(grid_thw[:, 2], counts)
    side = cfg.grid_side
    h_taps, h_w = _axis_taps(positions[:, 0], heights, side)
    w_taps, w_w = _axis_taps(positions[:, 1], widths, side)
    index = (h_taps[:, :, None] * side + w_taps[:, None, :]).reshape(-1, 4)
    weight = (h_w[:, :, None] * w_w[:, None, :]).reshape(-1, 4)
    return index, weight


def prepare_qwen3_vision_inputs(grid_thw, cfg: Qwen3VisionConfig, pad_to: int | None = None) -> Qwen3VisionMeta:
    """Host metadata for `Qwen3VisionTower.__call__` from grid_thw [num_images, 3] (t, h, w in patches).

    pad_to: static padded patch count (multiple of merge_size**2, >= sum(t*h*w)); None = no padding.
    """
    grid = vc.validate_grid_thw(grid_thw, cfg.spatial_merge_size)
    n = vc.num_patches(grid)
    n_pad = vc.resolve_pad_to(n, pad_to, cfg.merge_unit)
    cos, sin = vc.rotary_tables(vc.patch_positions(grid, cfg.spatial_merge_size), cfg.head_dim, cfg.rope_theta)
    index, weight = position_embedding_taps(grid, cfg)
    frame = vc.uniform_frame_patches(grid)
    return Qwen3VisionMeta(
        cos=vc.pad_rows(cos, n_pad, 0.0),
        sin=vc.pad_rows(sin, n_pad, 0.0),
        segments=vc.pad_rows(vc.frame_segment_ids(grid), n_pad, -1),
        pos_index=vc.pad_rows(index.astype(np.int32), n_pad, 0),
        pos_weight=vc.pad_rows(weight, n_pad, 0.0),
        merged_valid=vc.merged_valid_mask(n, n_pad, cfg.merge_unit),
        frame_block=frame if frame is not None and n_pad % frame == 0 else None,
    )


class LayerNorm(nnx.Module):
    """(x - mean) / sqrt(var + eps) * scale + bias, statistics in float32."""

    def __init__(self, dim: int, *, eps: float = 1e-6, dtype=jnp.float32, param_dtype=jnp.float32):
        self.scale = vc.param(jnp.ones((dim,), param_dtype), ("vision_embed",))
        self.bias = vc.param(jnp.zeros((dim,), param_dtype), ("vision_embed",))
        self.eps, self.dtype = eps, dtype

    def __call__(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        xf = x.astype(jnp.float32)
        mean = jnp.mean(xf, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
        y = (xf - mean) * (1.0 / jnp.sqrt(var + self.eps)) * self.scale[...] + self.bias[...]
        return y.astype(self.dtype)


class Qwen3VisionMLP(nnx.Module):
    def __init__(self, dim: int, hidden: int, act: str, *, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.linear_fc1 = vc.Dense(dim, hidden, ("vision_embed", "vision_mlp"), **kw)
        self.linear_fc2 = vc.Dense(hidden, dim, ("vision_mlp", "vision_embed"), **kw)
        self.act = vc.activation(act)

    def __call__(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return self.linear_fc2(self.act(self.linear_fc1(x)))


class Qwen3VisionBlock(nnx.Module):
    def __init__(self, cfg: Qwen3VisionConfig, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        d = cfg.hidden_size
        self.norm1 = LayerNorm(d, dtype=dtype, param_dtype=param_dtype)
        self.norm2 = LayerNorm(d, dtype=dtype, param_dtype=param_dtype)
        self.attn = vc.VisionAttention(d, cfg.num_heads, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.mlp = Qwen3VisionMLP(d, cfg.intermediate_size, cfg.hidden_act, dtype=dtype, param_dtype=param_dtype,
                                  rngs=rngs)

    def __call__(self, x: Float[Array, "n d"], cos: Float[Array, "n hd"], sin: Float[Array, "n hd"],
                 segments: Int[Array, " n"] | None, block: int | None = None) -> Float[Array, "n d"]:
        x = x + self.attn(self.norm1(x), cos, sin, segments, block)
        return x + self.mlp(self.norm2(x))


class Qwen3PatchMerger(nnx.Module):
    """LayerNorm (per patch, or after the concat when `postshuffle`), concat merge_size**2 patches, Linear ->
    GELU(exact) -> Linear to out_hidden_size. The final merger has postshuffle=False, DeepStack mergers True."""

    def __init__(self, cfg: Qwen3VisionConfig, postshuffle: bool, *, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs):
        d_in = cfg.hidden_size * cfg.merge_unit
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.norm = LayerNorm(d_in if postshuffle else cfg.hidden_size, dtype=dtype, param_dtype=param_dtype)
        self.linear_fc1 = vc.Dense(d_in, d_in, ("vision_embed", "vision_mlp"), **kw)
        self.linear_fc2 = vc.Dense(d_in, cfg.out_hidden_size, ("vision_mlp", "vision_embed"), **kw)
        self.postshuffle, self.merge_unit = postshuffle, cfg.merge_unit

    def __call__(self, x: Float[Array, "n d"]) -> Float[Array, "m out"]:
        if self.postshuffle:
            h = self.norm(vc.merge_groups(x, self.merge_unit))
        else:
            h = vc.merge_groups(self.norm(x), self.merge_unit)
        return self.linear_fc2(vc.activation("gelu")(self.linear_fc1(h)))


class Qwen3VisionTower(vc.HFTensorsMixin, nnx.Module):
    """Qwen3-VL vision encoder: patches [N, C*T*P*P] -> (merged [N / merge**2, out_hidden], DeepStack features).

    config: HF vision config as a plain dict (config.json "vision_config") or an HF config object (its to_dict()
    is used). Computation runs in `dtype` (norms, rotary, softmax in float32); parameters are stored in
    `param_dtype` and carry logical axis names.
    """

    HF_NAME = "Qwen3-VL vision"

    def __init__(self, config, *, dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        cfg = config if isinstance(config, Qwen3VisionConfig) else Qwen3VisionConfig.from_hf(config)
        bad = [i for i in cfg.deepstack_visual_indexes if not 0 <= i < cfg.depth]
        if bad:
            raise UserInputError(f"vision config deepstack_visual_indexes: {bad} outside [0, depth={cfg.depth})")
        self.config = cfg
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.patch_embed = vc.PatchEmbed(cfg.patch_dim, cfg.hidden_size, bias=True, **kw)
        self.pos_embed = vc.param(vc.normal(rngs, (cfg.num_position_embeddings, cfg.hidden_size), param_dtype),
                                  (None, "vision_embed"))
        self.blocks = nnx.List([Qwen3VisionBlock(cfg, **kw) for _ in range(cfg.depth)])
        self.merger = Qwen3PatchMerger(cfg, postshuffle=False, **kw)
        self.deepstack_merger_list = nnx.List(
            [Qwen3PatchMerger(cfg, postshuffle=True, **kw) for _ in cfg.deepstack_visual_indexes])
        self.dtype = dtype

    def prepare(self, grid_thw, pad_to: int | None = None) -> Qwen3VisionMeta:
        """Host metadata for `__call__` (see `prepare_qwen3_vision_inputs`)."""
        return prepare_qwen3_vision_inputs(grid_thw, self.config, pad_to)

    def __call__(self, pixel_values: Float[Array, "n patch_dim"],
                 grid_or_meta) -> tuple[Float[Array, "m out_hidden"], list[Float[Array, "m out_hidden"]]]:
        """pixel_values [N, C*T*P*P] with either grid_thw (host numpy [num_images, 3]: validated, unpadded, eager
        use) or a `Qwen3VisionMeta` from `prepare` (jittable; N must equal the meta's padded length).
        Returns (merged [N / merge**2, out_hidden], one [N / merge**2, out_hidden] array per DeepStack index,
        in `deepstack_visual_indexes` order)."""
        meta = self._meta(pixel_values, grid_or_meta)
        x = self.patch_embed(pixel_values)
        taps = self.pos_embed[...][meta.pos_index].astype(jnp.float32)  # [n, 4, d]
        pos = jnp.sum(taps * jnp.asarray(meta.pos_weight)[:, :, None], axis=1)
        x = (x.astype(jnp.float32) + pos).astype(self.dtype)
        cos, sin = jnp.asarray(meta.cos), jnp.asarray(meta.sin)
        deepstack = []
        segments = meta.segments if meta.frame_block is None else None
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, segments, meta.frame_block)
            if i in self.config.deepstack_visual_indexes:
                merger = self.deepstack_merger_list[self.config.deepstack_visual_indexes.index(i)]
                deepstack.append(merger(x))
        return self.merger(x), deepstack

    def _meta(self, pixel_values, grid_or_meta) -> Qwen3VisionMeta:
        if isinstance(grid_or_meta, Qwen3VisionMeta):
            n = grid_or_meta.segments.shape[0]
            if pixel_values.shape != (n, self.config.patch_dim):
                raise UserInputError(f"pixel_values: metadata was prepared for shape ({n}, {self.config.patch_dim}), "
                                 f"got {tuple(pixel_values.shape)}")
            return grid_or_meta
        grid = vc.validate_grid_thw(grid_or_meta, self.config.spatial_merge_size)
        vc.check_pixel_values(pixel_values, grid, self.config.patch_dim)
        return self.prepare(grid)

    def hf_tensor_table(self) -> list[vc.HFTensor]:
        return qwen3_hf_tensor_table(self.config)


def _merger_tensors(prefix: str, path: tuple, cfg: Qwen3VisionConfig, postshuffle: bool) -> list[vc.HFTensor]:
    d_in = cfg.hidden_size * cfg.merge_unit
    norm_dim = d_in if postshuffle else cfg.hidden_size
    table = vc.norm_tensors(f"{prefix}.norm", path + ("norm",), norm_dim, [("weight", "scale"), ("bias", "bias")])
    table += vc.dense_tensors(f"{prefix}.linear_fc1", path + ("linear_fc1",), d_in, d_in)
    table += vc.dense_tensors(f"{prefix}.linear_fc2", path + ("linear_fc2",), d_in, cfg.out_hidden_size)
    return table


def qwen3_hf_tensor_table(cfg: Qwen3VisionConfig) -> list[vc.HFTensor]:
    """Every HF tensor of the Qwen3-VL vision tower with its parameter path and layout conversion."""
    d, i = cfg.hidden_size, cfg.intermediate_size
    ln = [("weight", "scale"), ("bias", "bias")]
    table = vc.patch_embed_tensors("patch_embed.proj", ("patch_embed",), d, cfg.in_channels,
                                   cfg.temporal_patch_size, cfg.patch_size, bias=True)
    table.append(vc.HFTensor("pos_embed.weight", ("pos_embed",), (cfg.num_position_embeddings, d),
                             lambda x: x, lambda x: x))
    for b in range(cfg.depth):
        pre, path = f"blocks.{b}", ("blocks", b)
        table += vc.norm_tensors(f"{pre}.norm1", path + ("norm1",), d, ln)
        table += vc.norm_tensors(f"{pre}.norm2", path + ("norm2",), d, ln)
        table += vc.attention_tensors(f"{pre}.attn", path + ("attn",), d, cfg.num_heads)
        table += vc.dense_tensors(f"{pre}.mlp.linear_fc1", path + ("mlp", "linear_fc1"), d, i)
        table += vc.dense_tensors(f"{pre}.mlp.linear_fc2", path + ("mlp", "linear_fc2"), i, d)
    table += _merger_tensors("merger", ("merger",), cfg, postshuffle=False)
    for j in range(len(cfg.deepstack_visual_indexes)):
        table += _merger_tensors(f"deepstack_merger_list.{j}", ("deepstack_merger_list", j), cfg, postshuffle=True)
    return table
