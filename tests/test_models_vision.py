"""Parity of the Flax Qwen2.5-VL / Qwen3-VL vision towers with transformers' PyTorch towers on tiny random weights.

The HF towers are the vision modules of tiny random `Qwen2_5_VLForConditionalGeneration` /
`Qwen3VLForConditionalGeneration` models (fixed torch seeds, weights perturbed so that biases and norm scales are not
trivial zeros/ones). Float32 throughout; tolerance 1e-4 max abs difference.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import PIL.Image
import pytest
import torch
from flax import nnx

transformers = pytest.importorskip("transformers")

from jaxdrive.models import vision_common as vc  # noqa: E402
from jaxdrive.models.image_processing import ImageProcessorConfig, preprocess_images  # noqa: E402
from jaxdrive.models.vision_qwen3 import Qwen3VisionTower  # noqa: E402
from jaxdrive.models.vision_qwen25 import Qwen25VisionConfig, Qwen25VisionTower  # noqa: E402

TOL = 1e-4
TINY_TEXT = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1)
# window_size 56 = 2 merged tokens per window side at patch 14 / merge 2, so every grid below is split into windows.
Q25_VISION = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=24, patch_size=14,
                  spatial_merge_size=2, window_size=56, fullatt_block_indexes=[1])
Q3_VISION = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=24, patch_size=16,
                 spatial_merge_size=2, num_position_embeddings=64, deepstack_visual_indexes=[0, 2])

GRIDS = {
    "one_image": [[1, 6, 10]],
    "two_sizes": [[1, 4, 4], [1, 10, 6]],
    "video_and_uneven_windows": [[2, 4, 6], [1, 10, 14]],
    # frames of one size whose windows tile them: full attention runs in unmasked per-frame blocks
    "same_size_frames": [[1, 8, 8], [2, 8, 8]],
}


def _perturbed(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return module.eval()


@pytest.fixture(scope="module")
def qwen25():
    torch.manual_seed(0)
    cfg = transformers.Qwen2_5_VLConfig(text_config=TINY_TEXT, vision_config=Q25_VISION)
    model = transformers.Qwen2_5_VLForConditionalGeneration(cfg)
    hf = _perturbed(model.model.visual)
    return hf, Qwen25VisionTower.from_hf_state(cfg.vision_config.to_dict(), hf.state_dict())


@pytest.fixture(scope="module")
def qwen3():
    torch.manual_seed(1)
    cfg = transformers.Qwen3VLConfig(text_config=dict(TINY_TEXT, head_dim=16), vision_config=Q3_VISION)
    model = transformers.Qwen3VLForConditionalGeneration(cfg)
    hf = _perturbed(model.model.visual)
    return hf, Qwen3VisionTower.from_hf_state(cfg.vision_config, hf.state_dict())  # config object: to_dict() taken


def _pixels(grid, patch_dim, seed):
    n = int(np.prod(grid, axis=1).sum())
    return np.random.default_rng(seed).normal(size=(n, patch_dim)).astype(np.float32)


BUCKET = 256
TRACES = []


@nnx.jit
def _RUN(tower, x, meta):
    """One jitted function for every test: all grids below pad to the same bucket, so each tower compiles once."""
    TRACES.append(type(tower).__name__)
    return tower(x, meta)


def _jit_padded(tower, pixel_values, grid):
    """The jittable path: host metadata padded to the bucket, outputs cut back to the real merged tokens."""
    n = pixel_values.shape[0]
    n_pad = vc.bucket_length(n, BUCKET)
    meta = tower.prepare(grid, pad_to=n_pad)
    assert meta.merged_valid.sum() == n // 4 and meta.merged_valid.shape == (n_pad // 4,)
    out = _RUN(tower, vc.pad_pixel_values(pixel_values, n_pad), meta)
    return jax.tree.map(lambda a: np.asarray(a)[: n // 4], out)


def _grid_call(tower, pixel_values, grid):
    """The `tower(pixel_values, grid_thw)` path (host grid validated and turned into metadata at trace time)."""
    return jax.tree.map(np.asarray, nnx.jit(lambda t, x: t(x, grid))(tower, jnp.asarray(pixel_values)))


@pytest.mark.parametrize("name", list(GRIDS))
def test_qwen25_tower_matches_transformers(qwen25, name):
    hf, tower = qwen25
    grid = np.array(GRIDS[name])
    pv = _pixels(grid, tower.config.patch_dim, seed=len(name))
    with torch.no_grad():
        ref = hf(torch.from_numpy(pv), torch.from_numpy(grid)).pooler_output.numpy()
    padded = _jit_padded(tower, pv, grid)
    assert padded.shape == ref.shape == (int(np.prod(grid, axis=1).sum()) // 4, 24)
    worst = np.abs(padded - ref).max()
    if name == "two_sizes":
        worst = max(worst, np.abs(_grid_call(tower, pv, grid) - ref).max())
    print(f"qwen2.5 {name}: out {ref.shape}, worst |diff| = {worst:.2e}")
    assert worst <= TOL


def test_qwen25_window_attention_is_exercised(qwen25):
    """With every HF block switched to full attention the HF output moves by > 1e-3 on these grids, so the parity
    above really checks the window layout (and not only full attention)."""
    hf, _ = qwen25
    grid = np.array(GRIDS["video_and_uneven_windows"])
    pv = torch.from_numpy(_pixels(grid, 1176, seed=3))
    with torch.no_grad():
        windowed = hf(pv, torch.from_numpy(grid)).pooler_output.numpy()
        saved, hf.fullatt_block_indexes = hf.fullatt_block_indexes, list(range(len(hf.blocks)))
        try:
            full = hf(pv, torch.from_numpy(grid)).pooler_output.numpy()
        finally:
            hf.fullatt_block_indexes = saved
    assert np.abs(full - windowed).max() > 1e-3


@pytest.mark.parametrize("name", list(GRIDS))
def test_qwen3_tower_matches_transformers(qwen3, name):
    hf, tower = qwen3
    grid = np.array(GRIDS[name])
    pv = _pixels(grid, tower.config.patch_dim, seed=len(name))
    with torch.no_grad():
        out = hf(torch.from_numpy(pv), torch.from_numpy(grid))
    refs = [out.pooler_output.numpy()] + [d.numpy() for d in out.deepstack_features]
    runs = [_jit_padded(tower, pv, grid)] + ([_grid_call(tower, pv, grid)] if name == "two_sizes" else [])
    worst = 0.0
    for merged, deepstack in runs:
        assert len(deepstack) == 2 and merged.shape == refs[0].shape == (int(np.prod(grid, axis=1).sum()) // 4, 24)
        for ref, ours in zip(refs, [merged] + deepstack):
            worst = max(worst, np.abs(ours - ref).max())
    print(f"qwen3 {name}: out {refs[0].shape}, worst |diff| merged + deepstack = {worst:.2e}")
    assert worst <= TOL


def test_processor_output_feeds_tower(qwen25):
    """Our image processor's arrays drive the tower exactly as they drive transformers' tower."""
    hf, tower = qwen25
    rng = np.random.default_rng(5)
    images = [PIL.Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in [(60, 90), (30, 40)]]
    pv, grid = preprocess_images(images, ImageProcessorConfig(max_pixels=112 * 112))
    with torch.no_grad():
        ref = hf(torch.from_numpy(pv), torch.from_numpy(grid)).pooler_output.numpy()
    assert np.abs(_jit_padded(tower, pv, grid) - ref).max() <= TOL


def test_frame_blocks_chosen_for_same_size_frames(qwen25, qwen3):
    """Same-size frames attend in per-frame blocks (unmasked when the windows tile them); other mixes fall back to
    the masked full-sequence attention. Parity of both paths: the `*_matches_transformers` tests."""
    grid = np.array(GRIDS["same_size_frames"])
    m25, m3 = qwen25[1].prepare(grid, pad_to=256), qwen3[1].prepare(grid, pad_to=256)
    assert (m25.frame_block, m25.windows_full) == (64, True) and m3.frame_block == 64
    assert m25.full_segments.shape[0] % m25.frame_block == 0
    grid = np.array(GRIDS["video_and_uneven_windows"])
    m25, m3 = qwen25[1].prepare(grid, pad_to=512), qwen3[1].prepare(grid, pad_to=512)
    assert (m25.frame_block, m25.windows_full, m3.frame_block) == (None, False, None)


def test_one_compile_per_bucket(qwen3):
    """Different image mixes padded to the same bucket reuse one trace (mixes whose frames all have one size, when
    the bucket holds whole frames, get their own per-frame-size trace: `frame_block`)."""
    _, tower = qwen3
    for k, grid in enumerate(([[1, 4, 4], [1, 2, 2]], [[1, 2, 6], [1, 4, 2], [1, 8, 8]], [[2, 10, 6]])):
        _jit_padded(tower, _pixels(np.array(grid), tower.config.patch_dim, seed=k), np.array(grid))
        if k == 0:
            traces = len(TRACES)
    assert len(TRACES) == traces


@pytest.mark.parametrize("family", ["qwen25", "qwen3"])
def test_export_roundtrip_and_load_errors(family, request):
    hf, tower = request.getfixturevalue(family)
    hf_state = {k: v.numpy() for k, v in hf.state_dict().items()}
    exported = tower.export_hf_state()
    assert exported.keys() == hf_state.keys()
    for k, v in hf_state.items():
        np.testing.assert_array_equal(exported[k], v, err_msg=k)

    fresh = nnx.eval_shape(lambda: type(tower)(tower.config, rngs=nnx.Rngs(1)))
    missing = dict(hf_state)
    del missing["blocks.1.attn.qkv.weight"]
    with pytest.raises(ValueError, match=r"missing tensors \['blocks.1.attn.qkv.weight'\]"):
        fresh.load_hf_state(missing)
    bad = dict(hf_state, **{"blocks.0.mlp.down_proj.bias" if family == "qwen25" else "blocks.0.mlp.linear_fc2.bias":
                            np.zeros(7, np.float32)})
    with pytest.raises(ValueError, match=r"blocks\.0\.mlp\.\w+\.bias'?: expected shape \(32,\), got \(7,\)"):
        fresh.load_hf_state(bad)
    with pytest.raises(ValueError, match=r"unexpected tensors \['extra.weight'\]"):
        fresh.load_hf_state(dict(hf_state, **{"extra.weight": np.zeros(1)}))


@pytest.mark.parametrize("family", ["qwen25", "qwen3"])
def test_logical_axis_names_on_every_parameter(family, request):
    _, tower = request.getfixturevalue(family)
    from jaxdrive.parallel import LOGICAL_AXIS_RULES

    allowed = {None} | {name for name, _ in LOGICAL_AXIS_RULES}
    params = nnx.state(tower, nnx.Param)
    leaves = [v for _, v in nnx.to_flat_state(params)]
    assert leaves
    for v in leaves:
        axes = v.get_metadata()["out_sharding"]
        assert len(axes) == v.value.ndim and set(axes) <= allowed
    attn = tower.blocks[0].attn
    assert attn.qkv_kernel.get_metadata()["out_sharding"] == ("vision_embed", None, "vision_heads", "head_dim")


def test_bad_inputs_give_readable_errors(qwen25):
    _, tower = qwen25
    grid = np.array([[1, 4, 4]])
    with pytest.raises(ValueError, match=r"pixel_values: expected shape \[num_patches, 1176\].*got \(16, 784\)"):
        tower(jnp.zeros((16, 2 * 2 * 14 * 14)), grid)  # 2 channels instead of 3
    with pytest.raises(ValueError, match=r"implies 16 patches.*got 12 rows"):
        tower(jnp.zeros((12, 1176)), grid)
    with pytest.raises(ValueError, match=r"multiples of spatial_merge_size=2"):
        tower(jnp.zeros((15, 1176)), np.array([[1, 3, 5]]))
    with pytest.raises(ValueError, match=r"grid_thw: expected shape \[num_images >= 1, 3\]"):
        tower(jnp.zeros((16, 1176)), np.array([4, 4]))
    with pytest.raises(ValueError, match=r"pad_to: .* >= the patch count 16, got 8"):
        tower.prepare(grid, pad_to=8)
    meta = tower.prepare(grid, pad_to=32)
    with pytest.raises(ValueError, match=r"metadata was prepared for shape \(32, 1176\), got \(16, 1176\)"):
        tower(jnp.zeros((16, 1176)), meta)
    with pytest.raises(ValueError, match=r"window_size: must be >= .* 28, got 14"):
        Qwen25VisionTower(dataclasses.replace(tower.config, window_size=14), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"hidden_act: expected one of"):
        nnx.eval_shape(lambda: Qwen25VisionTower(dict(Q25_VISION, hidden_act="relu6"), rngs=nnx.Rngs(0)))


def test_config_from_plain_dict_uses_hf_defaults():
    cfg = Qwen25VisionConfig.from_hf({"depth": 2, "hidden_size": 64, "num_heads": 4, "out_hidden_size": 128,
                                      "fullatt_block_indexes": [1], "rope_theta": 5000.0})
    assert (cfg.window_size, cfg.patch_size, cfg.fullatt_block_indexes, cfg.rope_theta) == (112, 14, (1,), 5000.0)


@pytest.mark.parametrize("block, masked", [(None, True), (None, False), (4, True), (4, False)])
def test_sequential_heads_equal_vectorised(block, masked, monkeypatch):
    """segment_attention's CPU path (one head per lax.map step) equals the vectorised one (other backends)."""
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((3, 12, 8)), jnp.float32) for _ in range(3))
    seg = jnp.asarray([0, 0, 0, 1, 1, 1, 1, 2, 2, -1, -1, -1]) if masked else None
    outs, maps = {}, []
    lax_map = jax.lax.map
    monkeypatch.setattr(jax.lax, "map", lambda *a, **kw: maps.append(1) or lax_map(*a, **kw))
    for sequential in (True, False):
        monkeypatch.setattr(vc, "SEQUENTIAL_HEADS", sequential)
        outs[sequential] = np.asarray(jax.jit(lambda *a: vc.segment_attention(*a, block))(q, k, v, seg))  # fresh trace
        assert len(maps) == 1  # the sequential path loops, the vectorised one does not
    np.testing.assert_allclose(outs[True], outs[False], atol=1e-6, rtol=1e-6)
