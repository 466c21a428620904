"""Per-token log-probs and entropies over a large vocabulary without materialising [B, S, V] logits.

Definition (shared by the sampler and the trainer; keep them identical)::

    logits = (hidden @ W) / temperature                 W: lm_head [H, V] (or the tied embedding [V, H])
    logp[b, s] = log_softmax(logits[b, s])[targets[b, s]]   over the *full* vocabulary, float32
    entropy[b, s] = -sum_v p log p

``logp[b, s]`` scores ``targets[b, s]`` given ``hidden[b, s]``: callers shift (targets = input_ids[:, 1:] against
hidden[:, :-1]). Targets outside [0, V) (e.g. an ignore index of -100) give 0.0 with zero gradient; mask them.

Tokens are flattened to N = B*S rows and processed ``seq_chunk`` rows at a time (``lax.map``; N is padded up to a
multiple), and within a row chunk the vocabulary is streamed ``vocab_chunk`` columns at a time (``lax.scan``) with an
online logsumexp (running max m, sum s = sum exp(z - m), and for entropy t = sum exp(z - m) z). The last vocabulary
chunk is a clamped slice of W whose already-seen columns are masked, so W is never padded or copied. Both bodies are
rematerialised (``jax.checkpoint``), so the backward pass also holds one [seq_chunk, vocab_chunk] block at a time.
The matmul runs in the inputs' dtype with float32 accumulation (``preferred_element_type``); everything after is f32.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxdrive.errors import UserInputError


def _check(hidden, lm_head, head_is_vh: bool, targets=None) -> int:
    if hidden.ndim != 3:
        raise UserInputError(f"hidden: expected shape [B, S, H], got {hidden.shape}")
    if lm_head.ndim != 2:
        raise UserInputError(f"lm_head: expected a 2-D weight, got shape {lm_head.shape}")
    h_axis = 1 if head_is_vh else 0
    if lm_head.shape[h_axis] != hidden.shape[-1]:
        layout = "[V, H]" if head_is_vh else "[H, V]"
        raise UserInputError(f"lm_head: expected layout {layout} with H={hidden.shape[-1]}, got shape {lm_head.shape}"
                         f"{' (pass head_is_vh=True for a [V, H] embedding)' if not head_is_vh else ''}")
    if targets is not None:
        if targets.shape != hidden.shape[:2]:
            raise UserInputError(f"targets: expected shape {hidden.shape[:2]} ([B, S] of hidden), got {targets.shape}")
        if not jnp.issubdtype(targets.dtype, jnp.integer):
            raise UserInputError(f"targets: expected an integer dtype, got {targets.dtype}")
    return lm_head.shape[1 - h_axis]


def _stream(hidden: Float[Array, "N H"], lm_head: Float[Array, "..."], targets: Int[Array, "N"], *, head_is_vh: bool,
            temperature: float, seq_chunk: int, vocab_chunk: int, precision) -> tuple[Array, Array, Array]:
    """Returns (logZ, target logit, E_p[z]) per row, all f32 [N], with z = logits / temperature."""
    vocab = lm_head.shape[0] if head_is_vh else lm_head.shape[1]
    n = hidden.shape[0]
    sc = max(1, min(seq_chunk, n))
    vc = max(1, min(vocab_chunk, vocab))
    n_pad = -n % sc
    hidden = jnp.pad(hidden, ((0, n_pad), (0, 0)))
    targets = jnp.pad(targets, (0, n_pad), constant_values=-1)
    n_vocab_chunks = -(-vocab // vc)
    inv_t = 1.0 / temperature

    @jax.checkpoint
    def vocab_step(carry, c, h, tgt):
        m, s, t, tl = carry
        start = jnp.minimum(c * vc, vocab - vc)  # the last chunk is clamped; columns < c * vc were seen already
        if head_is_vh:
            w = jax.lax.dynamic_slice_in_dim(lm_head, start, vc, axis=0)
            z = jax.lax.dot_general(h, w, (((1,), (1,)), ((), ())), precision=precision,
                                    preferred_element_type=jnp.float32)
        else:
            w = jax.lax.dynamic_slice_in_dim(lm_head, start, vc, axis=1)
            z = jnp.matmul(h, w, precision=precision, preferred_element_type=jnp.float32)
        z = z.astype(jnp.float32) * inv_t
        ids = start + jnp.arange(vc)
        fresh = ids >= c * vc
        z_valid = jnp.where(fresh[None, :], z, -jnp.inf)
        m_new = jax.lax.stop_gradient(jnp.maximum(m, z_valid.max(axis=1)))  # result is invariant to m
        decay = jnp.exp(m - m_new)
        e = jnp.exp(z_valid - m_new[:, None])
        s = s * decay + e.sum(axis=1)
        t = t * decay + jnp.where(fresh[None, :], e * z, 0.0).sum(axis=1)
        hit = (ids[None, :] == tgt[:, None]) & fresh[None, :]
        tl = tl + jnp.where(hit, z, 0.0).sum(axis=1)
        return (m_new, s, t, tl), None

    @jax.checkpoint
    def row_chunk(args):
        h, tgt = args
        zeros = jnp.zeros((h.shape[0],), jnp.float32)
        init = (jnp.full((h.shape[0],), -jnp.inf, jnp.float32), zeros, zeros, zeros)
        (m, s, t, tl), _ = jax.lax.scan(functools.partial(vocab_step, h=h, tgt=tgt), init, jnp.arange(n_vocab_chunks))
        return m + jnp.log(s), tl, t / s

    chunks = (hidden.reshape(-1, sc, hidden.shape[-1]), targets.reshape(-1, sc))
    log_z, target_logit, mean_z = jax.lax.map(row_chunk, chunks)
    return log_z.reshape(-1)[:n], target_logit.reshape(-1)[:n], mean_z.reshape(-1)[:n]


_STATIC = ("head_is_vh", "temperature", "seq_chunk", "vocab_chunk", "precision")


@functools.partial(jax.jit, static_argnames=_STATIC)
def token_logprobs(
    hidden: Float[Array, "B S H"],
    lm_head: Float[Array, "H V"] | Float[Array, "V H"],
    targets: Int[Array, "B S"],
    *,
    head_is_vh: bool = False,
    temperature: float = 1.0,
    seq_chunk: int = 512,
    vocab_chunk: int = 16384,
    precision=None,
) -> Float[Array, "B S"]:
    """log p(targets[b, s]) under softmax((hidden[b, s] @ W) / temperature) over the full vocabulary, float32 [B, S].

    Args:
      hidden: final hidden states (after the last norm) [B, S, H].
      lm_head: [H, V] (``nnx.Linear`` kernel) or, with ``head_is_vh=True``, [V, H] (a tied embedding table).
      targets: int [B, S] token ids; ids outside [0, V) give 0.0.
      temperature: > 0; divides the logits (same as the sampler).
      seq_chunk / vocab_chunk: rows / vocabulary columns per block (peak extra memory ~ seq_chunk * vocab_chunk * 4 B).
      precision: ``jax.lax.Precision`` of the matmul (default: JAX's default, as in ``nnx.Linear``).
    Jitted; the keyword arguments are static (a new temperature or chunking compiles once more).
    """
    vocab = _check(hidden, lm_head, head_is_vh, targets)
    if not temperature > 0:
        raise UserInputError(f"temperature: expected > 0, got {temperature}")
    b, s, h = hidden.shape
    flat_t = targets.reshape(-1).astype(jnp.int32)
    log_z, target_logit, _ = _stream(hidden.reshape(b * s, h), lm_head, flat_t, head_is_vh=head_is_vh,
                                     temperature=temperature, seq_chunk=seq_chunk, vocab_chunk=vocab_chunk,
                                     precision=precision)
    valid = (flat_t >= 0) & (flat_t < vocab)
    return jnp.where(valid, target_logit - log_z, 0.0).reshape(b, s)


@functools.partial(jax.jit, static_argnames=_STATIC)
def token_entropy(
    hidden: Float[Array, "B S H"],
    lm_head: Float[Array, "H V"] | Float[Array, "V H"],
    *,
    head_is_vh: bool = False,
    temperature: float = 1.0,
    seq_chunk: int = 512,
    vocab_chunk: int = 16384,
    precision=None,
) -> Float[Array, "B S"]:
    """Entropy (nats) of softmax((hidden @ W) / temperature) per position, float32 [B, S]; same streaming scheme."""
    _check(hidden, lm_head, head_is_vh)
    if not temperature > 0:
        raise UserInputError(f"temperature: expected > 0, got {temperature}")
    b, s, h = hidden.shape
    dummy = jnp.full((b * s,), -1, jnp.int32)
    log_z, _, mean_z = _stream(hidden.reshape(b * s, h), lm_head, dummy, head_is_vh=head_is_vh,
                               temperature=temperature, seq_chunk=seq_chunk, vocab_chunk=vocab_chunk,
                               precision=precision)
    return (log_z - mean_z).reshape(b, s)
