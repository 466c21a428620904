"""LLM-as-critic: a local Qwen3 text model reads (question, reference, prediction) and gives the probability that the
prediction matches the reference, from its next-token logits restricted to "yes" / "no" tokens (OpenREAD Sec. 3.3.2;
the Lingo-Judge-style score of the text metrics).

``p_yes = sum_{yes ids} softmax(l)_k`` over the logits ``l`` of the yes and no token ids at the position after the
prompt (the assistant turn of the chat template, thinking disabled when the template supports it). Prompts are
left-padded into fixed-size batches (``batch_size`` rows, lengths rounded up to ``length_bucket``) so one compiled
function serves a whole run; the forward pass is jitted and only the [H, K] columns of the yes/no tokens of the
output projection are applied (no [B, S, V] logits). With a mesh, the weights are placed by their logical axes and
the batch split over the data axes (the policy's mesh or the critic's own).
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from jaxdrive.errors import UserInputError

#: The critic's user message (our wording of OpenREAD's Fig. 8 right panel, which is not released as text).
CRITIC_PROMPT = (
    "You are an expert judge of answers about driving scenes.\n"
    "Question: {question}\n"
    "Reference answer: {reference}\n"
    "Predicted answer: {prediction}\n"
    "Does the predicted answer match the reference answer in meaning? Reply with yes or no only."
)


@nnx.jit
def _choice_logits(model, inputs, ids: Int[Array, "K"]) -> Float[Array, "B K"]:
    """Logits of the tokens ``ids`` after the last (left-padded, so final) position."""
    last = jnp.full((inputs.input_ids.shape[0], 1), inputs.input_ids.shape[1] - 1)
    hidden = model.forward_hidden(inputs, query_index=last)[0][:, 0]  # the last layer runs at that position only
    w = model.lm_head_weight()[:, ids]
    return jnp.dot(hidden.astype(model.dtype), w.astype(model.dtype), preferred_element_type=jnp.float32)


def yes_probability(logits: Float[Array, "B K"], is_yes: Float[Array, "K"]) -> Float[Array, "B"]:
    """Probability mass of the yes tokens among the yes/no tokens."""
    p = jax.nn.softmax(logits, axis=-1)
    return (p * is_yes).sum(-1)


def first_token_ids(tokenizer, words: Sequence[str]) -> list[int]:
    """The first token id of each word (deduplicated, in order)."""
    out = []
    for w in words:
        ids = tokenizer.encode(w, add_special_tokens=False)
        if ids and ids[0] not in out:
            out.append(ids[0])
    return out


def render_prompt(tokenizer, question: str, reference: str, prediction: str, *, prompt: str = CRITIC_PROMPT,
                  max_len: int = 1024, max_prediction_chars: int = 2000) -> list[int]:
    """Token ids of one critic prompt: ``prompt`` filled in, in the tokenizer's chat template with the generation
    prompt (thinking off), cut to its last ``max_len`` tokens. Shared by ``QwenCritic`` and the critic's SFT data
    (``train.openread_recipe.critic_pairs_dataset``), so a trained critic is read exactly as it was taught."""
    text = prompt.format(question=question or "", reference=reference or "",
                         prediction=(prediction or "")[:max_prediction_chars])
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=False)
    return tokenizer.encode(text, add_special_tokens=False)[-max_len:]


class QwenCritic:
    """A Qwen3 (or any jaxdrive ``QwenModel``) critic with its tokenizer.

    Args:
      model: a ``QwenModel``; tokenizer: its transformers tokenizer.
      prompt: user-message template with ``{question}``, ``{reference}``, ``{prediction}``.
      yes_words / no_words: surface forms whose first tokens count as yes / no (must not share a first token).
      batch_size: rows per device call (the batch is padded to it); length_bucket: prompt lengths round up to it.
      max_len: prompts longer than this keep their last ``max_len`` tokens (the question and the instruction's tail).
      max_prediction_chars: predictions are cut to this many characters first.
      mesh: optional mesh for the batch (weights placed by ``from_pretrained(..., mesh=...)``).
    """

    def __init__(self, model, tokenizer, *, prompt: str = CRITIC_PROMPT, yes_words=("yes", "Yes"),
                 no_words=("no", "No"), batch_size: int = 16, length_bucket: int = 64, max_len: int = 1024,
                 max_prediction_chars: int = 2000, mesh=None):
        self.model, self.tokenizer, self.prompt, self.mesh = model, tokenizer, prompt, mesh
        yes, no = first_token_ids(tokenizer, yes_words), first_token_ids(tokenizer, no_words)
        if not yes or not no or set(yes) & set(no):
            raise UserInputError(f"critic: yes words {yes_words} and no words {no_words} must have distinct first tokens "
                             f"(got {yes} / {no})")
        self.ids = jnp.asarray(yes + no, jnp.int32)
        self.is_yes = jnp.asarray([1.0] * len(yes) + [0.0] * len(no), jnp.float32)
        self.batch_size, self.length_bucket, self.max_len = batch_size, length_bucket, max_len
        self.max_prediction_chars = max_prediction_chars
        pad = tokenizer.pad_token_id
        self.pad_id = 0 if pad is None else int(pad)

    @classmethod
    def from_pretrained(cls, path: str, *, dtype=jnp.bfloat16, mesh=None, **kw) -> "QwenCritic":
        """A critic from a local HF directory (weights + tokenizer), e.g. Qwen3-8B; no download."""
        from transformers import AutoTokenizer

        from jaxdrive.models.weights import from_pretrained

        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as e:
            raise UserInputError(f"critic path {path!r}: cannot load its tokenizer ({e})") from None
        return cls(from_pretrained(path, dtype, mesh=mesh), tokenizer, mesh=mesh, **kw)

    def render(self, question: str, reference: str, prediction: str) -> list[int]:
        """Token ids of one critic prompt (chat template with the generation prompt, thinking off)."""
        return render_prompt(self.tokenizer, question, reference, prediction, prompt=self.prompt, max_len=self.max_len,
                             max_prediction_chars=self.max_prediction_chars)

    def probabilities(self, questions: Sequence[str], references: Sequence[str],
                      predictions: Sequence[str]) -> np.ndarray:
        """[N] float64 probability that each prediction matches its reference."""
        n = len(predictions)
        if not (len(questions) == len(references) == n):
            raise UserInputError(f"critic: {len(questions)} questions, {len(references)} references, {n} predictions")
        prompts = [self.render(q, r, p) for q, r, p in zip(questions, references, predictions)]
        out = np.zeros(n, np.float64)
        for s in range(0, n, self.batch_size):
            chunk = prompts[s : s + self.batch_size]
            out[s : s + len(chunk)] = self._batch(chunk)
        return out

    def _batch(self, prompts: list[list[int]]) -> np.ndarray:
        length = -(-max(len(p) for p in prompts) // self.length_bucket) * self.length_bucket
        ids = np.full((self.batch_size, length), self.pad_id, np.int32)
        mask = np.zeros((self.batch_size, length), np.int32)
        for i, p in enumerate(prompts + [prompts[0]] * (self.batch_size - len(prompts))):
            ids[i, length - len(p):], mask[i, length - len(p):] = p, 1
        inputs = self.model.prepare_inputs(ids, mask)
        if self.mesh is not None:
            from jaxdrive.train.forward import shard_batch

            inputs = shard_batch(inputs, self.mesh)
        p = yes_probability(_choice_logits(self.model, inputs, self.ids), self.is_yes)
        return np.asarray(p, np.float64)[: len(prompts)]


def pair_separation(critic: "QwenCritic", pairs: Sequence[dict], threshold: float = 0.5) -> dict:
    """How well a critic separates matching from non-matching answers on labelled pairs (dicts with ``question``,
    ``reference``, ``prediction``, ``match``; e.g. ``data.openread_cot.critic_pairs`` of held-out scenes): mean
    p(yes) of each class, accuracy of ``p > threshold``, and the AUC (probability that a random matching pair scores
    above a random non-matching one, ties counting half)."""
    p = critic.probabilities([x["question"] for x in pairs], [x["reference"] for x in pairs],
                             [x["prediction"] for x in pairs])
    y = np.asarray([bool(x["match"]) for x in pairs])
    if y.all() or not y.any():
        raise UserInputError("pairs: need both matching and non-matching pairs")
    pos, neg = p[y], p[~y]
    auc = float(((pos[:, None] > neg[None]).mean() + 0.5 * (pos[:, None] == neg[None]).mean()))
    return {"p_yes_match": float(pos.mean()), "p_yes_mismatch": float(neg.mean()),
            "accuracy": float(((p > threshold) == y).mean()), "auc": auc, "pairs": int(len(y))}
