"""Chunked log-probs/entropy equal the full log_softmax computation (values, gradients, under jit)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdrive.models.logprobs import token_entropy, token_logprobs

B, S, H, V = 2, 7, 16, 45


def _inputs(seed=0):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    hidden = jax.random.normal(k1, (B, S, H))
    w = jax.random.normal(k2, (H, V)) * 0.7
    targets = jax.random.randint(k3, (B, S), 0, V)
    return hidden, w, targets


def _full_logp(hidden, w, targets, temperature=1.0):
    logits = jnp.einsum("bsh,hv->bsv", hidden, w, precision="highest") / temperature
    logp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def _full_entropy(hidden, w, temperature=1.0):
    logp = jax.nn.log_softmax(jnp.einsum("bsh,hv->bsv", hidden, w, precision="highest") / temperature, axis=-1)
    return -(jnp.exp(logp) * logp).sum(-1)


# chunk sizes that divide and do not divide N = B*S = 14 and V = 45, plus chunks larger than the arrays
@pytest.mark.parametrize("seq_chunk,vocab_chunk,temperature",
                         [(14, 45, 1.0), (4, 8, 0.7), (5, 44, 1.3), (100, 1000, 0.7), (1, 1, 1.0)])
def test_logprobs_and_entropy_match_full(seq_chunk, vocab_chunk, temperature):
    hidden, w, targets = _inputs()
    kw = dict(temperature=temperature, seq_chunk=seq_chunk, vocab_chunk=vocab_chunk,
              precision=jax.lax.Precision.HIGHEST)
    got = token_logprobs(hidden, w, targets, **kw)
    assert got.shape == (B, S) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, _full_logp(hidden, w, targets, temperature), atol=1e-5, rtol=0)
    np.testing.assert_allclose(token_entropy(hidden, w, **kw), _full_entropy(hidden, w, temperature),
                               atol=1e-5, rtol=0)


def test_vh_layout_bf16_and_ignore_index():
    hidden, w, targets = _inputs(1)
    targets = targets.at[0, 0].set(-100).at[1, 3].set(V)
    got = token_logprobs(hidden, w.T, targets, head_is_vh=True, seq_chunk=4, vocab_chunk=16,
                         precision=jax.lax.Precision.HIGHEST)
    ref = _full_logp(hidden, w, jnp.clip(targets, 0, V - 1))
    valid = np.ones((B, S), bool)
    valid[0, 0] = valid[1, 3] = False
    np.testing.assert_allclose(np.asarray(got)[valid], np.asarray(ref)[valid], atol=1e-5, rtol=0)
    assert float(got[0, 0]) == 0.0 and float(got[1, 3]) == 0.0
    # bf16 inputs: f32 accumulation, f32 output, close to the f32 reference on the same bf16 values
    hb, wb = hidden.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    got_bf16 = token_logprobs(hb, wb, jnp.clip(targets, 0, V - 1), vocab_chunk=16)
    assert got_bf16.dtype == jnp.float32
    ref_bf16 = _full_logp(hb.astype(jnp.float32), wb.astype(jnp.float32), jnp.clip(targets, 0, V - 1))
    np.testing.assert_allclose(got_bf16, ref_bf16, atol=1e-4, rtol=0)


def test_gradients_match_full():
    hidden, w, targets = _inputs(2)
    k1, k2 = jax.random.split(jax.random.key(9))
    w_lp, w_ent = jax.random.uniform(k1, (B, S)), jax.random.uniform(k2, (B, S))
    kw = dict(temperature=0.8, seq_chunk=4, vocab_chunk=16, precision=jax.lax.Precision.HIGHEST)

    def chunked(hidden, w):  # one program differentiates both the log-prob and the entropy paths
        return ((token_logprobs(hidden, w, targets, **kw) * w_lp).sum()
                + (token_entropy(hidden, w, **kw) * w_ent).sum())

    def full(hidden, w):
        return (_full_logp(hidden, w, targets, 0.8) * w_lp).sum() + (_full_entropy(hidden, w, 0.8) * w_ent).sum()

    g_chunked = jax.jit(jax.grad(chunked, argnums=(0, 1)))(hidden, w)
    g_full = jax.jit(jax.grad(full, argnums=(0, 1)))(hidden, w)
    for a, b in zip(g_chunked, g_full):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_jitted_program_has_no_full_logits():
    hidden, w, targets = _inputs(3)
    fn = functools.partial(token_logprobs, seq_chunk=4, vocab_chunk=16, precision=jax.lax.Precision.HIGHEST)
    np.testing.assert_allclose(fn(hidden, w, targets), _full_logp(hidden, w, targets), atol=1e-5, rtol=0)
    hlo = token_logprobs.lower(hidden, w, targets, seq_chunk=4, vocab_chunk=16).as_text()
    assert f"{B * S}x{V}" not in hlo and f"{B}x{S}x{V}" not in hlo  # no full-vocabulary logits block anywhere


def test_bad_shapes_error_clearly():
    hidden, w, targets = _inputs()
    with pytest.raises(ValueError, match=r"lm_head: expected layout \[H, V\].*head_is_vh=True"):
        token_logprobs(hidden, w.T, targets)
    with pytest.raises(ValueError, match="targets: expected shape"):
        token_logprobs(hidden, w, targets[:, :3])
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(hidden, w, targets, temperature=0.0)
