"""Pieces shared by the Qwen2.5-VL and Qwen3-VL vision towers.

Two halves:

* **Host side (numpy)**: everything that depends on the image grids `grid_thw` (static metadata) is computed here,
  before jit: per-patch 2-D rotary tables, attention segment ids (the dense-mask form of transformers' `cu_seqlens`),
  validation of `pixel_values` against the grids, and padding of the patch count to a bucketed static length.
  The jitted tower then only sees arrays of a fixed shape, so one compile serves every image mix of the same bucket.
* **Device side (Flax NNX)**: parameter helper with logical axis names, dense layer, patch embedding (the HF Conv3d with
  stride == kernel, written as one matmul over flattened patches) and segment-masked multi-head attention with 2-D
  rotary embeddings.

Patch order conventions (identical to transformers): patches of one image are listed block-major over the
`merge x merge` spatial-merge blocks, i.e. for block row `bh`, block col `bw`, in-block row `i`, in-block col `j` the
patch sits at grid position (`bh*merge + i`, `bw*merge + j`); images (and frames of a video) follow one another.

Logical axis names used on parameters (mapped to mesh axes by `jaxdrive.parallel.LOGICAL_AXIS_RULES`):
'vision_embed' (tower width, also the merger output), 'vision_mlp' (MLP / merger inner width), 'vision_heads'
(attention heads), 'head_dim' (per-head width), 'vision_patch' (flattened patch pixels); None for axes that are
never sharded (q/k/v selector, position-table rows).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxdrive.errors import UserInputError
from jaxdrive.models.attention import masked_attention

Axes = tuple[str | None, ...]

# ----------------------------------------------------------------------------------------------------------------------
# Parameters
# ----------------------------------------------------------------------------------------------------------------------


def param(value: jax.Array, axes: Axes) -> nnx.Param:
    """An `nnx.Param` carrying logical axis names as `out_sharding` metadata (not eagerly sharded).

    `jaxdrive.parallel` maps the names to mesh axes; `nnx.get_partition_spec(nnx.state(module))` reads them back.
    """
    if len(axes) != value.ndim:
        raise UserInputError(f"param: {len(axes)} axis names {axes} for an array of shape {value.shape}")
    return nnx.Param(value, out_sharding=axes, eager_sharding=False)


def normal(rngs: nnx.Rngs, shape: Sequence[int], dtype, std: float = 0.02) -> jax.Array:
    """Normal(0, std) initial values (HF's `initializer_range`); real weights come from `load_hf_state`."""
    return std * jax.random.normal(rngs.params(), tuple(shape), dtype)


class Dense(nnx.Module):
    """y = x @ kernel + bias with kernel [in, out] (the transpose of torch's nn.Linear weight)."""

    def __init__(self, d_in: int, d_out: int, axes: tuple[str | None, str | None], *, bias: bool = True,
                 dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):
        self.kernel = param(normal(rngs, (d_in, d_out), param_dtype), axes)
        self.bias = param(jnp.zeros((d_out,), param_dtype), (axes[1],)) if bias else None
        self.dtype = dtype

    def __call__(self, x: Float[Array, "... d_in"]) -> Float[Array, "... d_out"]:
        y = jnp.dot(x.astype(self.dtype), self.kernel[...].astype(self.dtype), preferred_element_type=jnp.float32)
        if self.bias is not None:
            y = y + self.bias[...].astype(jnp.float32)
        return y.astype(self.dtype)


class PatchEmbed(nnx.Module):
    """Conv3d(kernel = stride = [T, P, P]) over flattened patches as one matmul.

    Input rows are patches flattened in (channel, time, row, col) order, exactly the layout of transformers' image
    processor output and of the Conv3d weight [D, C, T, P, P] flattened over its last four axes.
    """

    def __init__(self, patch_dim: int, embed_dim: int, *, bias: bool, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs):
        self.proj = Dense(patch_dim, embed_dim, ("vision_patch", "vision_embed"), bias=bias, dtype=dtype,
                          param_dtype=param_dtype, rngs=rngs)

    def __call__(self, pixel_values: Float[Array, "n patch_dim"]) -> Float[Array, "n embed"]:
        return self.proj(pixel_values)


ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "silu": jax.nn.silu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
}


def activation(name: str) -> Callable[[jax.Array], jax.Array]:
    """The jnp function for an HF `hidden_act` name."""
    if name not in ACTIVATIONS:
        raise UserInputError(f"vision config hidden_act: expected one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


# ----------------------------------------------------------------------------------------------------------------------
# Attention
# ----------------------------------------------------------------------------------------------------------------------


def rotate_half(x: Float[Array, "... d"]) -> Float[Array, "... d"]:
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rotary(x: Float[Array, "heads n head_dim"], cos: Float[Array, "n head_dim"],
                 sin: Float[Array, "n head_dim"]) -> Float[Array, "heads n head_dim"]:
    """Rotary embedding in float32 (rotate-half convention) on heads-major ``x``, result cast back to x's dtype."""
    xf = x.astype(jnp.float32)
    out = xf * cos + rotate_half(xf) * sin
    return out.astype(x.dtype)


#: Run the attention heads one per ``lax.map`` step: None (default) on CPU only (see ``segment_attention``).
#: Read at trace time. XLA's cost analysis counts a loop body once, so FLOP counts trace with False.
SEQUENTIAL_HEADS: bool | None = None


def segment_attention(q: Float[Array, "heads n d"], k: Float[Array, "heads n d"], v: Float[Array, "heads n d"],
                      segment_ids: Int[Array, " n"] | None, block: int | None = None) -> Float[Array, "heads n d"]:
    """Softmax attention (heads-major) where token i sees token j iff segment_ids[i] == segment_ids[j] and both lie
    in the same run of `block` consecutive tokens (`block` None: one run, the whole sequence).

    The dense-mask form of transformers' per-`cu_seqlens`-chunk attention (block-diagonal mask). `block` (n must be a
    multiple of it) cuts the work to n * block scores: Qwen2.5-VL's windowed layers pass the padded window length, so
    each window attends only to itself, as transformers' per-window loop does; full-attention layers pass the padded
    frame length when every frame has the same size (`frame_block`), so each image attends only to itself instead
    of computing the cross-image scores a block-diagonal mask would throw away. `segment_ids` None: no mask (the
    caller knows each block holds a single segment). Every token sees at least itself, so no row is fully masked
    (padding tokens share segment id -1 and only see each other). Memory is O(heads * n * block); scores and softmax
    statistics are float32 (`jaxdrive.models.attention`). The heads-major layout makes the block split a free
    reshape. On CPU the heads run one per `lax.map` step (see the comment in the body).
    """
    heads, n, d = q.shape
    block = n if block is None else block
    if n % block:
        raise UserInputError(f"segment_attention: length {n} is not a multiple of the block length {block}")

    def blocks(x):  # [heads, n, d] -> [heads, n / block, block, d] (no singleton axis: it costs XLA a layout copy)
        return x if block == n else x.reshape(heads, n // block, block, d)

    mask = None
    if segment_ids is not None:
        seg = segment_ids if block == n else segment_ids.reshape(n // block, block)
        mask = seg[..., :, None] == seg[..., None, :]  # [(n / block,) block, block], broadcast over heads
    q, k, v = blocks(q), blocks(k), blocks(v)
    if SEQUENTIAL_HEADS or (SEQUENTIAL_HEADS is None and jax.default_backend() == "cpu"):
        # one head per loop step: the loop boundary makes XLA:CPU materialise the rotated q and k once, instead of
        # fusing the rotation into the attention's matmuls (its YNNPACK fusion), where it is re-evaluated per tile:
        # 1.7x the time of a whole attention layer at 1,024 patches
        out = jax.lax.map(lambda qkv: masked_attention(*qkv, mask, d ** -0.5), (q, k, v))
    else:
        out = masked_attention(q, k, v, mask, d ** -0.5)
    return out.reshape(heads, n, d)


class VisionAttention(nnx.Module):
    """Fused-qkv multi-head self-attention with 2-D rotary and segment masking (same in both Qwen families).

    Parameters: qkv kernel [embed, 3, heads, head_dim] + bias [3, heads, head_dim]; proj kernel [heads, head_dim,
    embed] + bias [embed]. The HF fused `qkv.weight` [3*embed, embed] maps onto it by a transpose and reshape.
    The projections are token-major matmuls ([n, embed] x [embed, 3 * heads * head_dim], then [n, heads * head_dim]
    x [heads * head_dim, embed]) with one transpose to and from the heads-major [heads, n, head_dim] attention.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs):
        if embed_dim % num_heads:
            raise UserInputError(f"vision config: hidden_size {embed_dim} is not divisible by num_heads {num_heads}")
        head_dim = embed_dim // num_heads
        self.qkv_kernel = param(normal(rngs, (embed_dim, 3, num_heads, head_dim), param_dtype),
                                ("vision_embed", None, "vision_heads", "head_dim"))
        self.qkv_bias = param(jnp.zeros((3, num_heads, head_dim), param_dtype), (None, "vision_heads", "head_dim"))
        self.proj_kernel = param(normal(rngs, (num_heads, head_dim, embed_dim), param_dtype),
                                 ("vision_heads", "head_dim", "vision_embed"))
        self.proj_bias = param(jnp.zeros((embed_dim,), param_dtype), ("vision_embed",))
        self.dtype = dtype

    def __call__(self, x: Float[Array, "n embed"], cos: Float[Array, "n head_dim"], sin: Float[Array, "n head_dim"],
                 segment_ids: Int[Array, " n"] | None, block: int | None = None) -> Float[Array, "n embed"]:
        """`block` / `segment_ids` None: attend inside consecutive runs of `block` tokens / unmasked (see
        `segment_attention`)."""
        n, d = x.shape
        _, three, heads, head_dim = self.qkv_kernel.shape
        # token-major matmuls (a plain [n, d] x [d, 3 * heads * head_dim] GEMM: asking the matmul for a heads-major
        # result makes XLA:CPU run it transposed, at half the speed), then one transpose to heads-major
        qkv = jnp.dot(x.astype(self.dtype), self.qkv_kernel[...].astype(self.dtype).reshape(d, -1),
                      preferred_element_type=jnp.float32)
        qkv = (qkv + self.qkv_bias[...].astype(jnp.float32).reshape(-1)).astype(self.dtype)
        qkv = qkv.reshape(n, three, heads, head_dim).transpose(1, 2, 0, 3)  # [3, heads, n, head_dim]
        q, k = apply_rotary(qkv[0], cos, sin), apply_rotary(qkv[1], cos, sin)
        out = segment_attention(q, k, qkv[2], segment_ids, block)
        out = out.transpose(1, 0, 2).reshape(n, heads * head_dim)
        y = jnp.dot(out, self.proj_kernel[...].astype(self.dtype).reshape(heads * head_dim, -1),
                    preferred_element_type=jnp.float32)
        return (y + self.proj_bias[...].astype(jnp.float32)).astype(self.dtype)


# ----------------------------------------------------------------------------------------------------------------------
# Host-side metadata
# ----------------------------------------------------------------------------------------------------------------------


def validate_grid_thw(grid_thw, merge_size: int) -> np.ndarray:
    """grid_thw as an int64 [num_images, 3] numpy array; h and w must be positive multiples of `merge_size`."""
    grid = np.asarray(grid_thw)
    if grid.ndim != 2 or grid.shape[1] != 3 or grid.shape[0] == 0:
        raise UserInputError(f"grid_thw: expected shape [num_images >= 1, 3], got {grid.shape}")
    if not np.issubdtype(grid.dtype, np.integer):
        raise UserInputError(f"grid_thw: expected an integer array, got dtype {grid.dtype}")
    if (grid <= 0).any():
        raise UserInputError(f"grid_thw: all entries must be positive, got {grid.tolist()}")
    if (grid[:, 1:] % merge_size).any():
        raise UserInputError(f"grid_thw: h and w must be multiples of spatial_merge_size={merge_size}, "
                         f"got {grid.tolist()}")
    return grid.astype(np.int64)


def num_patches(grid_thw: np.ndarray) -> int:
    """Total patch count sum(t * h * w)."""
    return int(np.prod(grid_thw, axis=1).sum())


def check_pixel_values(pixel_values, grid_thw: np.ndarray, patch_dim: int) -> None:
    """Host check that pixel_values [N, patch_dim] agrees with the grids (N == sum(t*h*w))."""
    shape = tuple(pixel_values.shape)
    if len(shape) != 2 or shape[1] != patch_dim:
        raise UserInputError(f"pixel_values: expected shape [num_patches, {patch_dim}] (= in_channels * "
                         f"temporal_patch_size * patch_size**2), got {shape}")
    expected = num_patches(grid_thw)
    if shape[0] != expected:
        raise UserInputError(f"pixel_values: grid_thw {grid_thw.tolist()} implies {expected} patches "
                         f"(sum of t*h*w), got {shape[0]} rows")


def patch_positions(grid_thw: np.ndarray, merge_size: int) -> np.ndarray:
    """(row, col) grid position of every patch in block-major order, frames repeated: int64 [N, 2]."""
    out = []
    for t, h, w in grid_thw.tolist():
        rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        shape = (h // merge_size, merge_size, w // merge_size, merge_size)
        rows = rows.reshape(shape).transpose(0, 2, 1, 3).reshape(-1)
        cols = cols.reshape(shape).transpose(0, 2, 1, 3).reshape(-1)
        out.append(np.tile(np.stack([rows, cols], axis=-1), (t, 1)))
    return np.concatenate(out, axis=0)


def rotary_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """Axial 2-D rotary cos/sin tables, float32 [N, head_dim].

    head_dim/4 frequencies inv_freq_i = theta^(-4i/head_dim); angles are [row*inv_freq, col*inv_freq] concatenated,
    then duplicated for the rotate-half convention (transformers' `Qwen*VisionRotaryEmbedding`).
    """
    if head_dim % 4:
        raise UserInputError(f"vision config: head_dim must be a multiple of 4 for 2-D rotary, got {head_dim}")
    spatial = head_dim // 2
    inv_freq = (1.0 / (np.float32(theta) ** (np.arange(0, spatial, 2, dtype=np.float32) / np.float32(spatial))))
    inv_freq = inv_freq.astype(np.float32)
    angles = positions.astype(np.float32)[:, :, None] * inv_freq  # [N, 2, head_dim/4]
    angles = np.concatenate([angles[:, 0], angles[:, 1]], axis=-1)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def frame_segment_ids(grid_thw: np.ndarray) -> np.ndarray:
    """Segment id per patch for full attention: every frame of every image is one segment. int32 [N]."""
    sizes = np.repeat(grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0])
    return np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)


def bucket_length(n: int, multiple: int = 256) -> int:
    """Smallest multiple of `multiple` that is >= n: a bucketed static patch count for `pad_to`.

    `multiple` must itself be a multiple of merge_size**2 (4 for every released Qwen-VL).
    """
    if n <= 0 or multiple <= 0:
        raise UserInputError(f"bucket_length: n and multiple must be positive, got n={n}, multiple={multiple}")
    return -(-n // multiple) * multiple


def resolve_pad_to(n: int, pad_to: int | None, merge_unit: int) -> int:
    """Checked padded length: n when pad_to is None, else pad_to (>= n, multiple of merge_size**2)."""
    if pad_to is None:
        return n
    if pad_to < n or pad_to % merge_unit:
        raise UserInputError(f"pad_to: expected a multiple of spatial_merge_size**2={merge_unit} that is >= the patch "
                         f"count {n}, got {pad_to}")
    return int(pad_to)


def pad_rows(x: np.ndarray, length: int, fill) -> np.ndarray:
    """x padded along axis 0 to `length` rows with `fill`."""
    if length < x.shape[0]:
        raise UserInputError(f"padding: cannot pad {x.shape[0]} rows to a shorter length {length}")
    if x.shape[0] == length:
        return x
    pad = np.full((length - x.shape[0],) + x.shape[1:], fill, dtype=x.dtype)
    return np.concatenate([x, pad], axis=0)


def pad_pixel_values(pixel_values, length: int) -> np.ndarray:
    """pixel_values [N, patch_dim] zero-padded to [length, patch_dim] float32 on the host."""
    return pad_rows(np.asarray(pixel_values, dtype=np.float32), length, 0.0)


def merge_groups(x: Float[Array, "n d"], merge_unit: int) -> Float[Array, "m merge_d"]:
    """Concatenate each run of `merge_unit` consecutive patches (one spatial-merge block): [n, d] -> [n/u, u*d]."""
    return x.reshape(x.shape[0] // merge_unit, merge_unit * x.shape[1])


def uniform_frame_patches(grid_thw: np.ndarray) -> int | None:
    """Patches per frame h * w when every frame of every image has the same (h, w), else None."""
    sizes = grid_thw[:, 1] * grid_thw[:, 2]
    return int(sizes[0]) if (grid_thw[:, 1:] == grid_thw[0, 1:]).all() else None


def merged_valid_mask(n_valid: int, n_padded: int, merge_unit: int) -> np.ndarray:
    """bool [n_padded / merge_unit]: True for merged tokens that come from real patches."""
    return np.arange(n_padded // merge_unit) < n_valid // merge_unit


# ----------------------------------------------------------------------------------------------------------------------
# HF state-dict conversion
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HFTensor:
    """One HF tensor <-> one of our parameters.

    name: HF state-dict key without the `visual.` / `model.visual.` prefix. path: attribute path of the nnx.Param.
    hf_shape: expected HF shape. to_ours / to_hf: numpy reshapes/transposes between the two layouts.
    """

    name: str
    path: tuple[str | int, ...]
    hf_shape: tuple[int, ...]
    to_ours: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def _transpose(x: np.ndarray) -> np.ndarray:
    return x.T


def dense_tensors(prefix: str, path: tuple, d_in: int, d_out: int, bias: bool = True) -> list[HFTensor]:
    """Tensors of a torch nn.Linear (weight [out, in]) mapped to our Dense (kernel [in, out])."""
    out = [HFTensor(f"{prefix}.weight", path + ("kernel",), (d_out, d_in), _transpose, _transpose)]
    if bias:
        out.append(HFTensor(f"{prefix}.bias", path + ("bias",), (d_out,), _identity, _identity))
    return out


def norm_tensors(prefix: str, path: tuple, dim: int, names: Sequence[tuple[str, str]]) -> list[HFTensor]:
    """Norm vectors: (hf_suffix, our_attr) pairs, e.g. [("weight", "scale"), ("bias", "bias")]."""
    return [HFTensor(f"{prefix}.{hf}", path + (ours,), (dim,), _identity, _identity) for hf, ours in names]


def attention_tensors(prefix: str, path: tuple, dim: int, heads: int) -> list[HFTensor]:
    """HF fused qkv [3*dim, dim] / proj [dim, dim] to VisionAttention's [dim, 3, heads, hd] / [heads, hd, dim]."""
    hd = dim // heads
    return [
        HFTensor(f"{prefix}.qkv.weight", path + ("qkv_kernel",), (3 * dim, dim),
                 lambda x: x.T.reshape(dim, 3, heads, hd), lambda x: x.reshape(dim, 3 * dim).T),
        HFTensor(f"{prefix}.qkv.bias", path + ("qkv_bias",), (3 * dim,),
                 lambda x: x.reshape(3, heads, hd), lambda x: x.reshape(3 * dim)),
        HFTensor(f"{prefix}.proj.weight", path + ("proj_kernel",), (dim, dim),
                 lambda x: x.T.reshape(heads, hd, dim), lambda x: x.reshape(dim, dim).T),
        HFTensor(f"{prefix}.proj.bias", path + ("proj_bias",), (dim,), _identity, _identity),
    ]


def patch_embed_tensors(prefix: str, path: tuple, embed: int, in_channels: int, temporal: int, patch: int,
                        bias: bool) -> list[HFTensor]:
    """Conv3d weight [embed, C, T, P, P] <-> Dense kernel [C*T*P*P, embed]."""
    hf_shape = (embed, in_channels, temporal, patch, patch)
    out = [HFTensor(f"{prefix}.weight", path + ("proj", "kernel"), hf_shape,
                    lambda x: x.reshape(embed, -1).T, lambda x: x.T.reshape(hf_shape))]
    if bias:
        out.append(HFTensor(f"{prefix}.bias", path + ("proj", "bias"), (embed,), _identity, _identity))
    return out


def _get_param(module: nnx.Module, path: tuple) -> nnx.Param:
    node = module
    for p in path:
        node = node[p] if isinstance(p, int) else getattr(node, p)
    return node


def load_hf_tensors(module: nnx.Module, table: Sequence[HFTensor], tensors: Mapping[str, object],
                    what: str) -> None:
    """Copy HF tensors (numpy / torch / jax arrays, keys without the visual prefix) into `module` in place.

    Raises ValueError naming every missing, unexpected or mis-shaped tensor.
    """
    expected = {t.name for t in table}
    missing = sorted(expected - set(tensors))
    unexpected = sorted(set(tensors) - expected)
    problems = []
    if missing:
        problems.append(f"missing tensors {missing}")
    if unexpected:
        problems.append(f"unexpected tensors {unexpected}")
    for t in table:
        if t.name in tensors and tuple(tensors[t.name].shape) != t.hf_shape:
            problems.append(f"tensor {t.name!r}: expected shape {t.hf_shape}, got {tuple(tensors[t.name].shape)}")
    if problems:
        raise UserInputError(f"{what} weights: " + "; ".join(problems))
    for t in table:
        p = _get_param(module, t.path)
        p.set_value(jnp.asarray(t.to_ours(_to_numpy(tensors[t.name])), dtype=p.get_value().dtype))


def build_from_hf_state(cls, config, tensors: Mapping[str, object], **kwargs) -> nnx.Module:
    """`cls(config, **kwargs)` built abstractly (`nnx.eval_shape`, no random init) and filled from HF tensors."""
    module = nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(0), **kwargs))
    module.load_hf_state(tensors)
    return module


def export_hf_tensors(module: nnx.Module, table: Sequence[HFTensor]) -> dict[str, np.ndarray]:
    """Our parameters as an HF-named dict of numpy arrays (keys without the visual prefix)."""
    return {t.name: np.ascontiguousarray(t.to_hf(np.asarray(_get_param(module, t.path).get_value()))) for t in table}


def _to_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor (bf16 is not numpy-representable: go through float32)
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def config_dict(config) -> dict:
    """A plain dict from an HF vision config: a dict (e.g. config.json's "vision_config") or a config object."""
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise TypeError(f"vision config: expected a dict or an object with to_dict(), got {type(config).__name__}")


def rope_theta(cfg: Mapping) -> float:
    """Vision rotary base: rope_parameters['rope_theta'] (transformers >= 5), else rope_theta, else 10000."""
    params = cfg.get("rope_parameters") or {}
    return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))



_HF_ALIASES = {"num_heads": "num_attention_heads", "depth": "num_hidden_layers"}


def config_from_hf(cls, config):
    """Build a frozen config dataclass `cls` from an HF vision config (dict or object); absent keys keep the
    dataclass defaults, which equal transformers' class defaults. Lists become tuples; `rope_theta` is resolved."""
    cfg = config_dict(config)
    kwargs = {}
    for f in fields(cls):
        key = f.name if f.name in cfg else _HF_ALIASES.get(f.name)
        if f.name == "rope_theta":
            kwargs["rope_theta"] = rope_theta(cfg)
        elif key in cfg and cfg[key] is not None:
            value = cfg[key]
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**kwargs)


class HFTensorsMixin:
    """HF weight I/O shared by the vision towers: a tower defines ``hf_tensor_table()`` and ``HF_NAME``."""

    HF_NAME = "vision tower"

    @classmethod
    def from_hf_state(cls, config, tensors, *, dtype=jnp.float32, param_dtype=jnp.float32):
        """Tower built without random init and loaded from HF tensors (prefix stripped)."""
        return build_from_hf_state(cls, config, tensors, dtype=dtype, param_dtype=param_dtype)

    def load_hf_state(self, tensors) -> None:
        """Load HF tensors (keys with the `visual.` / `model.visual.` prefix stripped); errors name bad tensors."""
        load_hf_tensors(self, self.hf_tensor_table(), tensors, self.HF_NAME)

    def export_hf_state(self) -> dict[str, np.ndarray]:
        """Parameters as HF-named numpy arrays (keys without prefix)."""
        return export_hf_tensors(self, self.hf_tensor_table())


class VisionConfigMixin:
    """Derived sizes shared by the vision configs (frozen dataclasses with hidden_size, num_heads, in_channels,
    temporal_patch_size, patch_size and spatial_merge_size)."""

    @classmethod
    def from_hf(cls, config):
        return config_from_hf(cls, config)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2

    @property
    def merge_unit(self) -> int:
        return self.spatial_merge_size ** 2
