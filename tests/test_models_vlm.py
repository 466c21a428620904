"""Vision-language parity with transformers (float32): one image, two images of different sizes, a padded batch."""
import numpy as np
import pytest

pytest.importorskip("torch")

from jaxdrive.models import from_pretrained  # noqa: E402
from jaxdrive.models import testing as T  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def pair(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    hf = T.save_tiny_model(request.param, path, seed=5)
    model = from_pretrained(path)
    assert model.visual is not None
    return hf, model


def _unit(cfg) -> int:
    return cfg.vision_config.patch_size * cfg.vision_config.spatial_merge_size


def test_one_image(pair):
    hf, model = pair
    cfg = hf.config
    u = _unit(cfg)
    pv, grid = T.image_inputs(cfg, [(2 * u, 3 * u)], seed=1)
    ids = np.asarray([T.prompt_with_images(cfg, grid, [5, 6, 7], [], [10, 11, 12])])
    ours = np.asarray(model(ids, None, pv, grid))
    ref = T.hf_logits(hf, ids, None, pv, grid)
    err = np.abs(ours - ref).max()
    print(f"worst |dlogit| one image {cfg.model_type}: {err:.2e}")
    assert err <= TOL


def test_two_images_and_padded_batch(pair):
    """Row 0: two images of different sizes in one prompt (no padding); row 1: one image, left-padded."""
    hf, model = pair
    cfg = hf.config
    u = _unit(cfg)
    pv0, g0 = T.image_inputs(cfg, [(2 * u, 3 * u), (3 * u, u)], seed=2)
    pv1, g1 = T.image_inputs(cfg, [(u, 2 * u)], seed=3)
    r0 = T.prompt_with_images(cfg, g0, [5, 6], [8, 9], [10, 11, 12])
    r1 = T.prompt_with_images(cfg, g1, [5], [], [13, 14])
    s = len(r0)
    ids = np.zeros((2, s), np.int64)
    mask = np.zeros((2, s), np.int64)
    ids[0], mask[0] = r0, 1
    ids[1, s - len(r1):], mask[1, s - len(r1):] = r1, 1
    pv, grid = np.concatenate([pv0, pv1]), np.concatenate([g0, g1])
    ours = np.asarray(model(ids, mask, pv, grid))
    ref = T.hf_logits(hf, ids, mask, pv, grid)
    valid = mask.astype(bool)
    err_two = np.abs(ours[0] - ref[0]).max()
    err_pad = np.abs(ours[1] - ref[1])[valid[1]].max()
    print(f"worst |dlogit| {cfg.model_type}: two images {err_two:.2e}, padded batch {err_pad:.2e}")
    assert err_two <= TOL and err_pad <= TOL


def test_image_inputs_are_validated(pair):
    hf, model = pair
    cfg = hf.config
    u = _unit(cfg)
    pv, grid = T.image_inputs(cfg, [(u, u)])
    ids = np.asarray([T.prompt_with_images(cfg, grid, [5], [], [6])])
    with pytest.raises(ValueError, match="image-pad tokens"):
        model.prepare_inputs(ids[:, :-3], None, pv, grid)
    with pytest.raises(ValueError, match="pixel_values"):
        model.prepare_inputs(ids, None, pv[:-1], grid)
    with pytest.raises(ValueError, match="together"):
        model.prepare_inputs(ids, None, pv, None)


def test_same_size_images_unpadded_per_frame(pair):
    """Two rows with one same-size image each and frames of >= `bucket` patches: the patches are not padded to the
    bucket, the tower attends per frame (`frame_block`), and the logits still match transformers."""
    import jax.numpy as jnp

    from jaxdrive.models.vlm import _jit_logits

    hf, model = pair
    cfg = hf.config
    u = _unit(cfg)
    pv, grid = T.image_inputs(cfg, [(2 * u, 2 * u), (2 * u, 2 * u)], seed=4)
    rows = [T.prompt_with_images(cfg, grid[i : i + 1], [5 + i], [], [10, 11]) for i in range(2)]
    ids = np.asarray(rows)
    inputs = model.prepare_inputs(ids, None, pv, grid, bucket=16)
    assert inputs.pixel_values.shape[0] == pv.shape[0] and inputs.vision_meta.frame_block is not None
    ours = np.asarray(_jit_logits(model, inputs))
    err = np.abs(ours - T.hf_logits(hf, ids, None, pv, grid)).max()
    print(f"worst |dlogit| same-size images {cfg.model_type}: {err:.2e}")
    assert err <= TOL and jnp.isfinite(ours).all()


def test_query_index_equals_full_pass_rows(pair):
    """forward_hidden(query_index=...) (the last layer run at those positions only) returns the full pass's hidden
    states there, with padding, two images and (Qwen3-VL) DeepStack additions into the last layer."""
    import jax
    import jax.numpy as jnp

    hf, model = pair
    cfg = hf.config
    u = _unit(cfg)
    pv, grid = T.image_inputs(cfg, [(2 * u, 3 * u), (u, 2 * u)], seed=6)
    r0 = T.prompt_with_images(cfg, grid[:1], [5, 6], [], [10, 11, 12])
    r1 = T.prompt_with_images(cfg, grid[1:], [5], [], [13])
    s = len(r0)
    ids, mask = np.zeros((2, s), np.int64), np.zeros((2, s), np.int64)
    ids[0], mask[0] = r0, 1
    ids[1, s - len(r1):], mask[1, s - len(r1):] = r1, 1
    inputs = model.prepare_inputs(ids, mask, pv, grid)
    index = jnp.asarray([[s - 1, 0, 3], [s - 1, s - 2, s - len(r1)]], jnp.int32)
    full = jax.jit(lambda i: model.forward_hidden(i)[0])(inputs)
    some = jax.jit(lambda i, q: model.forward_hidden(i, query_index=q)[0])(inputs, index)
    want = np.take_along_axis(np.asarray(full), np.asarray(index)[..., None], axis=1)
    assert some.shape == (2, 3, full.shape[-1])
    np.testing.assert_allclose(np.asarray(some), want, atol=1e-5, rtol=1e-5)
