"""KV-cache generation: greedy parity with transformers' generate, reproducible sampling, log-probs = trainer's."""
import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from jaxdrive.models import from_pretrained  # noqa: E402
from jaxdrive.models import testing as T  # noqa: E402
from jaxdrive.models.generate import (  # noqa: E402
    SamplingConfig,
    filter_logits,
    generate,
    predecessor_index,
    teacher_forced_logprobs,
)

N_NEW = 16


_SETUPS = {}


def _setup(family, tmp_path_factory):
    """A tiny model pair and a left-padded batch: row 0 one image, row 1 another image and more text."""
    if family in _SETUPS:
        return _SETUPS[family]
    path = tmp_path_factory.mktemp(family)
    hf = T.save_tiny_model(family, path, seed=7)
    model = from_pretrained(path)
    cfg = hf.config
    u = cfg.vision_config.patch_size * cfg.vision_config.spatial_merge_size
    pv, grid = T.image_inputs(cfg, [(2 * u, 3 * u), (2 * u, 2 * u)], seed=4)
    rows = [T.prompt_with_images(cfg, grid[:1], [5, 6], [], [7, 8]),
            T.prompt_with_images(cfg, grid[1:], [5, 6, 9, 9, 9], [], [7, 8, 1])]
    s = max(map(len, rows))
    ids = np.zeros((2, s), np.int64)
    mask = np.zeros((2, s), np.int64)
    for i, r in enumerate(rows):
        ids[i, s - len(r):], mask[i, s - len(r):] = r, 1
    _SETUPS[family] = hf, model, (ids, mask, pv, grid)
    return _SETUPS[family]


@pytest.fixture(params=["qwen2_5_vl", "qwen3_vl"])
def setup(request, tmp_path_factory):
    return _setup(request.param, tmp_path_factory)


def test_greedy_matches_transformers_generate(setup):
    hf, model, (ids, mask, pv, grid) = setup
    config = SamplingConfig(max_new_tokens=N_NEW, greedy=True, stop_token_ids=(T.TINY_EOS,))
    out = generate(model, ids, mask, pv, grid, config=config)
    with torch.no_grad():
        ref = hf.generate(
            input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), pixel_values=torch.tensor(pv),
            image_grid_thw=torch.tensor(grid), mm_token_type_ids=torch.tensor(T.mm_token_type_ids(hf.config, ids)),
            max_new_tokens=N_NEW, do_sample=False, pad_token_id=0, eos_token_id=T.TINY_EOS,
        )[:, ids.shape[1]:].numpy()
    np.testing.assert_array_equal(np.asarray(out.tokens), ref)
    assert np.asarray(out.mask).all() and (np.asarray(out.lengths) == N_NEW).all()
    tf = teacher_forced_logprobs(model, ids, mask, out.tokens, out.mask, pv, grid)
    err = np.abs(np.asarray(tf) - np.asarray(out.logprobs)).max()
    print(f"greedy {hf.config.model_type}: |logprob - teacher-forced| max {err:.2e}")
    assert err <= 1e-5


def test_sampling_reproducible_and_logprobs_match_teacher_forcing(tmp_path_factory):
    """One family suffices: sampling and log-prob code is family-agnostic (greedy parity covers both)."""
    hf, model, (ids, mask, pv, grid) = _setup("qwen3_vl", tmp_path_factory)
    config = SamplingConfig(max_new_tokens=N_NEW, temperature=0.7, top_k=50, top_p=0.9, stop_token_ids=(3,))
    a = generate(model, ids, mask, pv, grid, config=config, key=jax.random.key(11))
    b = generate(model, ids, mask, pv, grid, config=config, key=jax.random.key(11))
    c = generate(model, ids, mask, pv, grid, config=config, key=jax.random.key(12))
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_array_equal(np.asarray(a.logprobs), np.asarray(b.logprobs))
    assert not np.array_equal(np.asarray(a.tokens), np.asarray(c.tokens))
    tf = teacher_forced_logprobs(model, ids, mask, a.tokens, a.mask, pv, grid, temperature=0.7)
    err = np.abs(np.asarray(tf) - np.asarray(a.logprobs)).max()
    print(f"sampled {hf.config.model_type}: |logprob - teacher-forced| max {err:.2e}")
    assert err <= 1e-5
    assert (np.asarray(a.logprobs)[np.asarray(a.mask)] < 0).all()


@pytest.fixture(scope="module")
def text_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3")
    hf = T.save_tiny_model("qwen3", path, seed=8, tie_word_embeddings=True)
    return hf, from_pretrained(path)


def test_stop_tokens_and_padding_side(text_model):
    """Right- and left-padded prompts generate the same; a stop token ends a row (kept, then pad, mask False)."""
    hf, model = text_model
    rng = np.random.default_rng(0)
    r0, r1 = rng.integers(1, 990, 5).tolist(), rng.integers(1, 990, 9).tolist()
    left = np.zeros((2, 9), np.int64)
    lmask = np.zeros_like(left)
    right, rmask = left.copy(), lmask.copy()
    for i, r in enumerate((r0, r1)):
        left[i, 9 - len(r):], lmask[i, 9 - len(r):] = r, 1
        right[i, : len(r)], rmask[i, : len(r)] = r, 1
    free = SamplingConfig(max_new_tokens=8, greedy=True)
    a = generate(model, left, lmask, config=free)
    b = generate(model, right, rmask, config=free)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_allclose(np.asarray(a.logprobs), np.asarray(b.logprobs), atol=1e-5)
    stop = int(np.asarray(a.tokens)[0, 2])
    first = int(np.argmax(np.asarray(a.tokens)[0] == stop))
    stopped = generate(model, left, lmask, config=SamplingConfig(max_new_tokens=8, greedy=True, stop_token_ids=(stop,), pad_token_id=0))
    toks, m = np.asarray(stopped.tokens), np.asarray(stopped.mask)
    np.testing.assert_array_equal(toks[0, : first + 1], np.asarray(a.tokens)[0, : first + 1])
    assert m[0, : first + 1].all() and not m[0, first + 1:].any() and (toks[0, first + 1:] == 0).all()
    assert int(stopped.lengths[0]) == first + 1
    tf = teacher_forced_logprobs(model, right, rmask, stopped.tokens, stopped.mask)
    assert np.abs(np.asarray(tf) - np.asarray(stopped.logprobs)).max() <= 1e-5


def test_filter_logits_matches_transformers_warpers():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    logits = np.random.default_rng(3).standard_normal((3, 200)).astype(np.float32) * 3
    for k, p in [(0, 0.9), (20, 1.0), (20, 0.5), (0, 0.3)]:
        ref = torch.tensor(logits)
        if k:
            ref = TopKLogitsWarper(k)(None, ref)
        if p < 1:
            ref = TopPLogitsWarper(p)(None, ref)
        ours = np.asarray(filter_logits(logits, k, p))
        np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(ref.numpy()), err_msg=f"top_k={k} top_p={p}")


def test_predecessor_index_skips_padding():
    mask = np.array([[0, 1, 1, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1, 1]], bool)
    np.testing.assert_array_equal(predecessor_index(mask), [[-1, -1, 1, 2, 2, 2, 5], [-1, 0, 1, 2, 3, 4, 5]])


def test_sampling_config_is_validated(text_model):
    _, model = text_model
    ids = np.array([[1, 2, 3]])
    with pytest.raises(ValueError, match="temperature"):
        generate(model, ids, config=SamplingConfig(temperature=0.0), key=jax.random.key(0))
    with pytest.raises(ValueError, match="key is required"):
        generate(model, ids, config=SamplingConfig())
