"""Batched generation with a static KV cache under one jit: prefill, then a ``lax.while_loop`` of decode steps.

Prompts may be left-, right- or un-padded: the prompt fills cache slots ``[0, S)``, generated token ``t`` goes to slot
``S + t`` for every row, and a key mask hides padding. The last of the ``T`` tokens is chosen without a forward pass of
its own (nothing reads its logits), so ``T = 1`` costs one prefill, as transformers' ``generate`` does. Rotary positions continue from the prompt: token ``t`` of row
``b`` sits at ``num_valid_prompt_tokens[b] + rope_delta[b] + t`` (see :mod:`jaxdrive.models.rope`), which is what a
teacher-forced pass over ``prompt + completion`` computes too.

Log-probs are the trainer's definition: ``log_softmax(logits / temperature)`` over the full vocabulary at the chosen
token, before any top-k / top-p truncation (greedy decoding reports them at ``temperature`` as well).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from jaxdrive.errors import UserInputError
from jaxdrive.models.logprobs import token_logprobs
from jaxdrive.models.vlm import ModelInputs, QwenModel, model_jit


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """max_new_tokens: decode steps T. greedy: argmax instead of sampling. temperature > 0 scales logits (and the
    reported log-probs). top_k: keep the k largest logits (0 = off). top_p in (0, 1]: nucleus filter (1 = off).
    stop_token_ids: a row stops after emitting one of them (the stop token is kept, mask True). pad_token_id: fills
    the tokens after a row stopped."""

    max_new_tokens: int = 32
    greedy: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    pad_token_id: int = 0

    def validate(self) -> None:
        if self.max_new_tokens < 1:
            raise UserInputError(f"SamplingConfig.max_new_tokens: expected >= 1, got {self.max_new_tokens}")
        if not self.temperature > 0:
            raise UserInputError(f"SamplingConfig.temperature: expected > 0, got {self.temperature}")
        if self.top_k < 0:
            raise UserInputError(f"SamplingConfig.top_k: expected >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise UserInputError(f"SamplingConfig.top_p: expected in (0, 1], got {self.top_p}")


@dataclasses.dataclass(frozen=True)
class GenerationOutput:
    """tokens: int32 [B, T] (``pad_token_id`` after a stop). logprobs: float32 [B, T] (0 where not generated).
    mask: bool [B, T], True for generated tokens (the stop token included). lengths: int32 [B] = mask.sum(1)."""

    tokens: Int[Array, "B T"]
    logprobs: Float[Array, "B T"]
    mask: Bool[Array, "B T"]
    lengths: Int[Array, "B"]


jax.tree_util.register_dataclass(
    GenerationOutput, data_fields=["tokens", "logprobs", "mask", "lengths"], meta_fields=[]
)


def filter_logits(scaled: Float[Array, "B V"], top_k: int, top_p: float) -> Float[Array, "B V"]:
    """Set logits outside the top-k / nucleus (top-p, transformers' rule) to -inf; ``scaled`` is logits/temperature.

    Tokens tied at a cut are all kept (each cut is a logit value), as transformers' top-k does; its top-p removes by
    sorted position instead, keeping of the tokens tied at its cut those its sort happens to place last. Without ties
    at the top-p cut the two agree exactly."""
    if top_k > 0 and top_k < scaled.shape[-1]:
        kth = jax.lax.top_k(scaled, top_k)[0][:, -1:]
        scaled = jnp.where(scaled < kth, -jnp.inf, scaled)
    if top_p < 1.0:
        ascending = jnp.sort(scaled, axis=-1)
        cum = jnp.cumsum(jax.nn.softmax(ascending, axis=-1), axis=-1)
        n_removed = jnp.minimum(jnp.sum(cum <= 1.0 - top_p, axis=-1, keepdims=True), scaled.shape[-1] - 1)
        cutoff = jnp.take_along_axis(ascending, n_removed, axis=-1)
        scaled = jnp.where(scaled < cutoff, -jnp.inf, scaled)
    return scaled


def choose_tokens(
    logits: Float[Array, "B V"], key: jax.Array | None, config: SamplingConfig
) -> tuple[Int[Array, "B"], Float[Array, "B"]]:
    """Next tokens and their log-probs ``log_softmax(logits / temperature)[token]`` (full vocabulary)."""
    scaled = logits.astype(jnp.float32) / config.temperature
    logp = jax.nn.log_softmax(scaled, axis=-1)
    if config.greedy:
        tok = jnp.argmax(logits, axis=-1)
    else:
        tok = jax.random.categorical(key, filter_logits(scaled, config.top_k, config.top_p), axis=-1)
    tok = tok.astype(jnp.int32)
    return tok, jnp.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]


def generate_from_inputs(
    model: QwenModel,
    inputs: ModelInputs,
    key: jax.Array | None,
    config: SamplingConfig,
    stop_ids: Int[Array, "K"] | None = None,
) -> GenerationOutput:
    """Traceable body of :func:`generate` (prefill + decode loop). ``stop_ids`` (int [K], -1 = unused) overrides
    ``config.stop_token_ids`` so that changing the stop tokens does not recompile."""
    b, s = inputs.input_ids.shape
    t_max = config.max_new_tokens
    cache = model.language_model.init_cache(b, s + t_max - 1)  # the last token is never fed back
    kv_mask = jnp.concatenate([inputs.attention_mask, jnp.zeros((b, t_max - 1), bool)], axis=1)
    last = s - 1 - jnp.argmax(inputs.attention_mask[:, ::-1], axis=1)
    hidden, cache, _ = model.forward_hidden(inputs, cache=cache, kv_mask=kv_mask, cache_index=0,
                                            query_index=last[:, None])
    logits = model.logits(hidden)[:, 0]
    base_pos = inputs.attention_mask.sum(1).astype(jnp.int32) + inputs.rope_deltas
    stop = jnp.asarray(config.stop_token_ids or (-1,), jnp.int32) if stop_ids is None else stop_ids
    key = jax.random.key(0) if key is None else key

    def choose(t, logits, done, toks, lps, msk):
        """Token ``t`` of every row from ``logits`` (pad after a stop), recorded in the outputs."""
        tok, lp = choose_tokens(logits, jax.random.fold_in(key, t), config)
        active = ~done
        tok = jnp.where(active, tok, config.pad_token_id)
        toks = toks.at[:, t].set(tok)
        lps = lps.at[:, t].set(jnp.where(active, lp, 0.0))
        msk = msk.at[:, t].set(active)
        return tok, active, done | (active & jnp.isin(tok, stop)), toks, lps, msk

    # tokens 0 .. T-2 each feed a forward pass giving the next logits; the last token needs none
    def cond(carry):
        t, _, _, _, done, *_ = carry
        return (t < t_max - 1) & ~jnp.all(done)

    def body(carry):
        t, logits, cache, kv_mask, done, toks, lps, msk = carry
        tok, active, done, toks, lps, msk = choose(t, logits, done, toks, lps, msk)
        kv_mask = kv_mask.at[:, s + t].set(active)
        pos = jnp.broadcast_to((base_pos + t)[None, :, None], (3, b, 1))
        step = ModelInputs(tok[:, None], active[:, None], pos, inputs.rope_deltas)
        hidden, cache, _ = model.forward_hidden(step, cache=cache, kv_mask=kv_mask, cache_index=s + t)
        return t + 1, model.logits(hidden)[:, 0], cache, kv_mask, done, toks, lps, msk

    carry = (
        jnp.int32(0),
        logits,
        cache,
        kv_mask,
        jnp.zeros((b,), bool),
        jnp.full((b, t_max), config.pad_token_id, jnp.int32),
        jnp.zeros((b, t_max), jnp.float32),
        jnp.zeros((b, t_max), bool),
    )
    t, logits, _, _, done, toks, lps, msk = jax.lax.while_loop(cond, body, carry)
    # the final token (rows already stopped record padding, as in the loop)
    _, _, _, toks, lps, msk = choose(t, logits, done, toks, lps, msk)
    return GenerationOutput(toks, lps, msk, msk.sum(1).astype(jnp.int32))


_generate_jit = model_jit(generate_from_inputs, static_argnames=("config",))


def generate(
    model: QwenModel,
    input_ids,
    attention_mask=None,
    pixel_values=None,
    image_grid_thw=None,
    *,
    config: SamplingConfig,
    key: jax.Array | None = None,
) -> GenerationOutput:
    """Generate up to ``config.max_new_tokens`` tokens per prompt (jitted; one compile per shape and config).

    input_ids / attention_mask: [B, S] prompts (any padding side); pixel_values / image_grid_thw as for the model
    call. ``key`` (a ``jax.random.key``) is required unless ``config.greedy``; the same key gives the same samples.
    """
    config.validate()
    if key is None and not config.greedy:
        raise UserInputError("generate: key is required for sampling (config.greedy is False)")
    inputs = model.prepare_inputs(input_ids, attention_mask, pixel_values, image_grid_thw)
    n_stop = len(config.stop_token_ids)
    stop = np.full(max(8, -(-n_stop // 8) * 8), -1, np.int32)  # padded to a multiple of 8: one compile
    stop[:n_stop] = config.stop_token_ids
    return _generate_jit(model, inputs, key, config=dataclasses.replace(config, stop_token_ids=()), stop_ids=stop)


def predecessor_index(mask: np.ndarray) -> np.ndarray:
    """``[B, L]`` index of the nearest valid position before each position (-1 if none): whose hidden state
    predicts the token there, skipping padding between prompt and completion."""
    mask = np.asarray(mask, bool)
    idx = np.where(mask, np.arange(mask.shape[1])[None], -1)
    prev = np.maximum.accumulate(idx, axis=1)
    return np.concatenate([np.full((mask.shape[0], 1), -1), prev[:, :-1]], axis=1)


def teacher_forced_logprobs(
    model: QwenModel,
    prompt_ids,
    prompt_mask,
    tokens,
    token_mask,
    pixel_values=None,
    image_grid_thw=None,
    *,
    temperature: float = 1.0,
) -> Float[Array, "B T"]:
    """Log-probs of completion ``tokens [B, T]`` recomputed in one pass over ``prompt + completion`` (the trainer's
    path: chunked log-probs over the vocabulary); 0 where ``token_mask`` is False."""
    prompt_ids, tokens = np.asarray(prompt_ids), np.asarray(tokens)
    pmask = np.ones(prompt_ids.shape, bool) if prompt_mask is None else np.asarray(prompt_mask, bool)
    tmask = np.asarray(token_mask, bool)
    ids = np.concatenate([prompt_ids, tokens], axis=1)
    mask = np.concatenate([pmask, tmask], axis=1)
    img = None
    if pixel_values is not None:  # only the prompt holds image slots, whatever the completion sampled
        img = np.concatenate([prompt_ids == model.cfg.image_token_id, np.zeros(tokens.shape, bool)], axis=1)
    hidden = model.hidden_states(ids, mask, pixel_values, image_grid_thw, image_mask=img)
    s = prompt_ids.shape[1]
    pred = np.maximum(predecessor_index(mask)[:, s:], 0)
    h = jnp.take_along_axis(hidden, jnp.asarray(pred)[:, :, None], axis=1)
    lp = token_logprobs(h, model.lm_head_weight(), jnp.asarray(tokens, jnp.int32), temperature=temperature)
    return jnp.where(jnp.asarray(tmask), lp, 0.0)
