"""GRPO rollouts: G sampled completions per prompt, with the sampler's per-token log-probs.

``sample_completions`` is a full-recompute sampler (one causal forward over the fixed-length [prompt | completion]
buffer per new token, no KV cache): exact and simple for the short answers of verifiable tasks; long generations
belong to the KV-cache generator of ``jaxdrive.models``. Its log-prob definition is the trainer's
(``forward.target_logprobs``: log_softmax of hidden @ lm_head / temperature, float32), so on-policy ratios are 1.

Layout: prompts are left-padded to P tokens, the completion occupies slots [P, P + T). ``inputs`` must be prepared
(``model.prepare_inputs``) with every completion slot marked valid, so M-RoPE positions continue after the prompt;
the model is causal, so slots not generated yet do not influence earlier ones.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jaxdrive.models.logprobs import token_logprobs


def sample_completions(model, inputs, prompt_len: int, max_new_tokens: int, key: jax.Array, *,
                       temperature: float = 1.0, eos_id: int, greedy: bool = False
                       ) -> tuple[Int[Array, "n t"], Float[Array, "n t"], Float[Array, "n t"]]:
    """Samples ``max_new_tokens`` tokens after each prompt (traceable; jit it with the model split).

    Returns (tokens [N, T] int32, mask [N, T] float32 = 1 up to and including the first eos, logp [N, T] of the
    sampled tokens under softmax(logits / temperature)). Tokens after the first eos are eos.
    """
    head = model.lm_head_weight()
    n = inputs.input_ids.shape[0]

    def step(carry, t):
        ids, done, key = carry
        key, sub = jax.random.split(key)
        hidden = model.forward_hidden(dataclasses.replace(inputs, input_ids=ids))[0]
        h = jax.lax.dynamic_slice_in_dim(hidden, prompt_len - 1 + t, 1, axis=1)  # [N, 1, H]
        logits = jnp.matmul(h[:, 0].astype(jnp.float32), head.astype(jnp.float32)) / temperature
        tok = jnp.argmax(logits, -1) if greedy else jax.random.categorical(sub, logits, axis=-1)
        tok = jnp.where(done, eos_id, tok).astype(jnp.int32)
        logp = token_logprobs(h, head, tok[:, None], temperature=temperature)[:, 0]
        ids = jax.lax.dynamic_update_slice_in_dim(ids, tok[:, None], prompt_len + t, axis=1)
        valid = ~done
        return (ids, done | (tok == eos_id), key), (tok, valid, logp)

    init = (inputs.input_ids, jnp.zeros((n,), bool), key)
    _, (tokens, valid, logp) = jax.lax.scan(step, init, jnp.arange(max_new_tokens))
    mask = valid.T.astype(jnp.float32)
    return tokens.T, mask, logp.T * mask
