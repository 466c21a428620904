"""Text decoder parity with transformers (float32) for Qwen3, Qwen2.5-VL and Qwen3-VL; M-RoPE index/layout units."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from jaxdrive.models import decoder, from_pretrained, parse_config  # noqa: E402
from jaxdrive.models.generate import SamplingConfig, generate  # noqa: E402
from jaxdrive.models import testing as T  # noqa: E402
from jaxdrive.models.rope import get_rope_index, mrope_axis_map  # noqa: E402

TOL = 1e-4
FAMILIES = [("qwen3", True), ("qwen2_5_vl", False), ("qwen3_vl", True)]


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda p: f"{p[0]}-{'tied' if p[1] else 'untied'}")
def pair(request, tmp_path_factory):
    family, tie = request.param
    path = tmp_path_factory.mktemp(f"{family}_{tie}")
    hf = T.save_tiny_model(family, path, tie_word_embeddings=tie, seed=3)
    return hf, from_pretrained(path)


def _left_padded(seed: int, length: int, pad: int):
    """Two rows of random token ids [2, length], row 0 left-padded by ``pad``: (ids, mask, position ids counting
    valid tokens only, as transformers' generate does)."""
    ids = np.random.default_rng(seed).integers(1, 990, (2, length))
    mask = np.ones_like(ids)
    mask[0, :pad] = 0
    ids[0, :pad] = 0
    return ids, mask, np.maximum(np.cumsum(mask, axis=1) - 1, 0)


def test_text_logits_match_transformers(pair):
    """Row 0 left-padded, row 1 full: positions count valid tokens only (as transformers' generate does), so the
    reference gets those position ids; logits compared at valid positions."""
    hf, model = pair
    ids, mask, pos = _left_padded(seed=1, length=11, pad=4)
    ours = np.asarray(model(ids, mask))
    ref = T.hf_logits(hf, ids, mask, position_ids=pos)
    assert ours.shape == ref.shape == (2, 11, T.TINY_VOCAB)
    err = np.abs(ours - ref)[mask.astype(bool)].max()
    print(f"worst |dlogit| text-only {hf.config.model_type}: {err:.2e}")
    assert err <= TOL


def test_causal_query_chunks_match_transformers(pair, monkeypatch):
    """Prefill attention in causal query chunks (chunk [a, b) attends to the keys before b only; 4-token chunks here,
    so a 13-token prompt runs 4 of them): logits equal transformers', and generation through the KV cache equals the
    unchunked one."""
    import jax

    hf, model = pair
    ids, mask, pos = _left_padded(seed=5, length=13, pad=3)
    config = SamplingConfig(max_new_tokens=4, greedy=True)
    runs, query_lengths = {}, set()
    attend = decoder.attend

    def spy(q, k, v, m):
        query_lengths.add((q.shape[1], k.shape[1]))
        return attend(q, k, v, m)

    monkeypatch.setattr(decoder, "attend", spy)
    try:
        for chunk in (4, 0):
            monkeypatch.setattr(decoder, "QUERY_CHUNK", chunk)
            jax.clear_caches()  # the module constant is read at trace time
            runs[chunk] = np.asarray(model(ids, mask)), generate(model, ids, mask, config=config)
    finally:
        jax.clear_caches()
    assert {(4, 4), (4, 8), (4, 12), (1, 13)} <= query_lengths  # chunks see the keys up to their end
    ref = T.hf_logits(hf, ids, mask, position_ids=pos)
    err = np.abs(runs[4][0] - ref)[mask.astype(bool)].max()
    assert err <= TOL, err
    np.testing.assert_array_equal(np.asarray(runs[4][1].tokens), np.asarray(runs[0][1].tokens))
    np.testing.assert_allclose(np.asarray(runs[4][1].logprobs), np.asarray(runs[0][1].logprobs), atol=1e-5)


def test_layer_parity_helper(tmp_path):
    hf = T.save_tiny_model("qwen3_vl", tmp_path, seed=4)
    model = from_pretrained(tmp_path)
    ids = np.random.default_rng(2).integers(1, 990, (1, 9))
    diffs = T.layer_parity(model, hf, ids)
    assert len(diffs) == hf.config.get_text_config().num_hidden_layers + 1
    assert max(diffs) <= TOL, diffs


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_rope_index_matches_transformers(family):
    """3-D positions and rope deltas for a padded batch with 1 and 2 images of different sizes."""
    cfg = T.tiny_hf_config(family)
    hf_model = T.build_hf_model(cfg)
    u = cfg.vision_config.patch_size * 2
    _, g0 = T.image_inputs(cfg, [(2 * u, 3 * u)])
    _, g1 = T.image_inputs(cfg, [(4 * u, 2 * u), (u, u)])
    r0 = T.prompt_with_images(cfg, g0, [5, 6], [], [7, 8, 9])
    r1 = T.prompt_with_images(cfg, g1, [5], [10, 11], [7])
    s = max(len(r0), len(r1)) + 1
    ids = np.zeros((2, s), np.int64)
    mask = np.zeros((2, s), np.int64)
    ids[0, s - len(r0):], mask[0, s - len(r0):] = r0, 1  # left padded
    ids[1, : len(r1)], mask[1, : len(r1)] = r1, 1  # right padded
    grid = np.concatenate([g0, g1])
    ours, deltas = get_rope_index(ids, mask, grid, cfg.vision_config.spatial_merge_size, image_token_id=cfg.image_token_id)
    ref, ref_d = hf_model.model.get_rope_index(
        torch.tensor(ids), torch.tensor(T.mm_token_type_ids(cfg, ids)), image_grid_thw=torch.tensor(grid),
        attention_mask=torch.tensor(mask),
    )
    valid = mask.astype(bool)
    np.testing.assert_array_equal(ours[:, valid], ref.numpy()[:, valid])
    np.testing.assert_array_equal(deltas, ref_d.numpy()[:, 0])
    assert deltas[0] < 0  # images compress positions: a delta of 0 would mean M-RoPE was dropped


def test_rope_index_errors_name_the_problem():
    ids = np.array([[1, 997, 997, 2]])
    with pytest.raises(ValueError, match="image_grid_thw has 3 images"):
        get_rope_index(ids, None, np.array([[1, 2, 2]] * 3), 2, image_token_id=997)
    with pytest.raises(ValueError, match="needs 4 consecutive image-pad tokens"):
        get_rope_index(ids, None, np.array([[1, 4, 4]]), 2, image_token_id=997)


def test_mrope_layouts():
    np.testing.assert_array_equal(mrope_axis_map(8, (2, 3, 3), False), [0, 0, 1, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(mrope_axis_map(8, (2, 3, 3), True), [0, 1, 2, 0, 1, 2, 0, 1])
    np.testing.assert_array_equal(mrope_axis_map(64, (24, 20, 20), True)[:6], [0, 1, 2, 0, 1, 2])
    assert (mrope_axis_map(64, (24, 20, 20), True)[60:] == 0).all()
    assert (mrope_axis_map(8, None, False) == 0).all()


def test_config_errors_name_the_field():
    raw = T.tiny_hf_config("qwen2_5_vl").to_dict()
    raw["text_config"]["rope_parameters"]["mrope_section"] = [2, 3, 4]
    with pytest.raises(ValueError, match="mrope_section"):
        parse_config(raw)
    with pytest.raises(ValueError, match="model_type"):
        parse_config({"model_type": "llama"})
