"""Supervised fine-tuning loss: next-token cross-entropy on target spans only.

Batch layout (padded, one compile): ``inputs`` (the model's ``ModelInputs``: input_ids [B, S], attention mask, M-RoPE
positions, image patches) and ``loss_mask`` [B, S] with 1 on the tokens to learn (assistant turns, or chosen spans
such as tool-call tokens) and 0 on prompts, observations and padding. Position s of the model output predicts ``input_ids[:, s + 1]``, so the loss at target token s + 1 uses
``logp[:, s]`` and ``loss_mask[:, s + 1]``.

The loss is returned as (sum, denominator) = (-sum m log p, sum m): adding the pairs over micro-batches / gradient
accumulation steps and dividing gives the true token mean of the whole batch.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxdrive.errors import UserInputError
from jaxdrive.models.logprobs import token_logprobs
from jaxdrive.train.forward import target_logprobs


def sft_loss_terms(
    logp: Float[Array, "b s"], mask: Float[Array, "b s"]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(sum of -log p over masked tokens, number of masked tokens); logp/mask are already shifted target-aligned."""
    m = mask.astype(jnp.float32)
    return -(logp.astype(jnp.float32) * m).sum(), m.sum()


def sft_loss_fn(model, batch: dict, key=None, *, temperature: float = 1.0):
    """Trainer loss function: (loss sum, denominator, metric sums) for one (micro-)batch ``{"inputs", "loss_mask"}``
    (optionally ``"targets"`` [B, S]: the ids to predict when they differ from the teacher-forced input)."""
    del key
    if "targets" in batch:
        hidden = model.forward_hidden(batch["inputs"])[0]
        logp = token_logprobs(hidden[:, :-1], model.lm_head_weight(), batch["targets"][:, 1:], temperature=temperature)
    else:
        logp = target_logprobs(model, batch["inputs"], temperature=temperature)
    mask = batch["loss_mask"][:, 1:].astype(jnp.float32) * batch["inputs"].attention_mask[:, 1:]
    total, denom = sft_loss_terms(logp, mask)
    return total, denom, {"tokens": denom}


def sft_example(prompt, answer, max_len: int, pad_id: int = 0, *, targets=None, answer_mask=None,
                **images) -> dict[str, np.ndarray]:
    """One fixed-length SFT example: ``input_ids`` = prompt + answer right-padded to ``max_len``, ``attention_mask``,
    ``loss_mask`` (1 on the answer tokens, or on those of ``answer_mask`` [len(answer)]); with ``targets``
    [len(answer)] (ids the loss predicts at the answer positions while the input keeps ``answer``) also ``targets``
    [max_len]. Extra per-example arrays (e.g. ``pixel_values`` [P, D], ``image_grid_thw`` [I, 3]) are passed
    through."""
    prompt, answer = np.asarray(prompt), np.asarray(answer)
    n = len(prompt) + len(answer)
    if n > max_len:
        raise UserInputError(f"max_len: example needs {n} tokens (prompt {len(prompt)} + answer {len(answer)}), "
                         f"got max_len={max_len}")
    for name, v in (("targets", targets), ("answer_mask", answer_mask)):
        if v is not None and np.shape(v) != answer.shape:
            raise UserInputError(f"{name}: expected shape {answer.shape} (one per answer token), got {np.shape(v)}")
    ids = np.full(max_len, pad_id, np.int32)
    ids[:n] = np.concatenate([prompt, answer])
    loss = np.zeros(max_len, np.float32)
    loss[len(prompt):n] = 1.0 if answer_mask is None else np.asarray(answer_mask, np.float32)
    out = {"input_ids": ids, "attention_mask": (np.arange(max_len) < n).astype(np.int32), "loss_mask": loss,
           **{k: np.asarray(v) for k, v in images.items()}}
    if targets is not None:
        out["targets"] = ids.copy()
        out["targets"][len(prompt):n] = np.asarray(targets)
    return out


def sft_batch(model, arrays: dict[str, np.ndarray]) -> dict:
    """Host collation of stacked examples into the trainer batch ``{"inputs": ModelInputs, "loss_mask": [B, S]}``.

    ``arrays``: input_ids / attention_mask / loss_mask [B, S] and optionally pixel_values [B, P, D] and
    image_grid_thw [B, I, 3] (equal-size images per example, so every batch has one shape and one compile).
    """
    pv, grid = arrays.get("pixel_values"), arrays.get("image_grid_thw")
    if pv is not None:
        pv = pv.reshape(-1, pv.shape[-1])
        grid = grid.reshape(-1, 3)
    inputs = model.prepare_inputs(arrays["input_ids"], arrays["attention_mask"], pv, grid,
                                  bucket=max(1, 0 if pv is None else pv.shape[0]))
    out = {"inputs": inputs, "loss_mask": np.asarray(arrays["loss_mask"], np.float32)}
    if "targets" in arrays:
        out["targets"] = np.asarray(arrays["targets"], np.int32)
    return out
