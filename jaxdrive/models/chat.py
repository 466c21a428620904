"""Chat prompts for Qwen-VL models: template rendering, image-token expansion and assistant-target masks.

Messages use the Hugging Face chat format: ``{"role": "system" | "user" | "assistant", "content": str | [items]}``
with items ``{"type": "text", "text": ...}`` or ``{"type": "image"}``. Text is rendered with the checkpoint's own chat
template; each image becomes ``<|vision_start|><|image_pad|> * n<|vision_end|>`` with
``n = t * h * w // merge_size**2`` from its row of ``image_grid_thw`` (what transformers' Qwen2.5-VL processor does).

``target_mask[b, s]`` is True on the tokens of assistant turns (their content and the closing ``<|im_end|>``, not the
``<|im_start|>assistant\\n`` header nor the newline after). It marks *tokens*; the SFT loss on logits[:, s - 1]
predicting token s uses ``target_mask[:, 1:]`` against ``input_ids[:, 1:]``.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import numpy as np
from jaxtyping import Bool, Int

from jaxdrive.errors import UserInputError
from jaxdrive.models.config import read_json_object
from jaxdrive.models.image_processing import read_preprocessor_config

IM_END = "<|im_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"


@dataclasses.dataclass(frozen=True)
class ChatEncoding:
    """A padded batch of chat prompts (numpy, host side).

    input_ids: int32 [B, S]; attention_mask: int32 [B, S] (1 = token, 0 = padding); target_mask: bool [B, S]
    (assistant tokens); image_grid_thw: int64 [num_images, 3], images in prompt order across the batch.
    """

    input_ids: Int[np.ndarray, "B S"]
    attention_mask: Int[np.ndarray, "B S"]
    target_mask: Bool[np.ndarray, "B S"]
    image_grid_thw: Int[np.ndarray, "I 3"]


def _token_id(tokenizer, token: str) -> int:
    idx = tokenizer.convert_tokens_to_ids(token)
    if idx is None or idx == tokenizer.unk_token_id:
        raise UserInputError(f"tokenizer has no {token!r} token; is this a Qwen-VL checkpoint tokenizer?")
    return int(idx)


@dataclasses.dataclass
class ChatEncoder:
    """Renders and tokenizes conversations with a checkpoint's tokenizer and chat template.

    ``merge_size``: the vision merger's spatial merge (2 for Qwen2.5-VL and Qwen3-VL).
    """

    tokenizer: Any
    merge_size: int = 2

    @classmethod
    def from_pretrained(cls, path: str) -> "ChatEncoder":
        """Loads the tokenizer of a local HF checkpoint directory (offline) and ``merge_size`` from its
        ``preprocessor_config.json`` (default 2; ``read_preprocessor_config``). The chat template comes from the tokenizer files or, failing that,
        from ``chat_template.json`` / ``chat_template.jinja`` in ``path``."""
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as e:  # no tokenizer files, one cut short: transformers' words, several lines
            raise UserInputError(f"{path}: cannot load its tokenizer ({' '.join(str(e).split())})") from None
        if not tokenizer.chat_template:
            json_path, jinja_path = os.path.join(path, "chat_template.json"), os.path.join(path, "chat_template.jinja")
            if os.path.exists(json_path):
                template = read_json_object(json_path).get("chat_template")
                if not isinstance(template, str) or not template:
                    raise UserInputError(f"{json_path}: chat_template: expected the template text (a string), "
                                     f"got {template!r:.60}")
                tokenizer.chat_template = template
            elif os.path.exists(jinja_path):
                with open(jinja_path) as f:
                    tokenizer.chat_template = f.read()
            else:
                raise UserInputError(f"{path}: tokenizer has no chat_template and no chat_template.json/.jinja was found")
        pre = read_preprocessor_config(path)
        return cls(tokenizer, pre.merge_size if pre else 2)

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = False) -> str:
        """The chat template applied to ``messages`` (one image placeholder per image)."""
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def _assistant_spans(self, messages: Sequence[dict], text: str) -> list[tuple[int, int]]:
        spans = []
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            prefix = self.render(messages[:i], add_generation_prompt=True)
            upto = self.render(messages[: i + 1])
            if not (upto.startswith(prefix) and text.startswith(upto)):
                raise UserInputError(f"messages[{i}]: the chat template does not render turns as a prefix-stable "
                                 "sequence, so assistant tokens cannot be located")
            chunk = upto[len(prefix):]
            end = chunk.rfind(IM_END)
            spans.append((len(prefix), len(prefix) + (end + len(IM_END) if end >= 0 else len(chunk))))
        return spans

    def _encode_one(self, messages: Sequence[dict], add_generation_prompt: bool) -> tuple[list[int], list[bool]]:
        text = self.render(messages, add_generation_prompt)
        cuts = [0]
        for start, end in self._assistant_spans(messages, text):
            cuts += [start, end]
        cuts.append(len(text))
        ids: list[int] = []
        mask: list[bool] = []
        for k in range(len(cuts) - 1):  # even segments: context, odd segments: assistant targets
            piece = self.tokenizer(text[cuts[k]:cuts[k + 1]], add_special_tokens=False)["input_ids"]
            ids += piece
            mask += [k % 2 == 1] * len(piece)
        if ids != self.tokenizer(text, add_special_tokens=False)["input_ids"]:
            raise UserInputError("tokenizing the assistant turns separately changed the token ids; the tokenizer merges "
                             "across turn boundaries, so the target mask would be misaligned")
        return ids, mask

    def encode(
        self,
        conversations: Sequence[Sequence[dict]],
        image_grid_thw: Int[np.ndarray, "I 3"] | None = None,
        *,
        add_generation_prompt: bool = False,
        padding_side: str = "right",
        pad_to_multiple_of: int = 1,
        max_length: int | None = None,
    ) -> ChatEncoding:
        """Tokenizes a batch of conversations into padded arrays.

        Args:
          conversations: B lists of messages.
          image_grid_thw: [num_images, 3] (t, h, w) patch grids of all images in order of appearance across the batch
            (as the image processor returns them); required iff there are images.
          add_generation_prompt: end each prompt with ``<|im_start|>assistant\\n`` (generation prompts).
          padding_side: "right" (training) or "left" (generation). pad_to_multiple_of: bucket S for fewer compiles.
          max_length: S is padded to this; a longer prompt is an error (truncation would cut image tokens).
        """
        if padding_side not in ("left", "right"):
            raise UserInputError(f"padding_side: expected 'left' or 'right', got {padding_side!r}")
        if isinstance(conversations, dict) or (len(conversations) and isinstance(conversations[0], dict)):
            raise UserInputError("conversations: expected a list of conversations (lists of messages); wrap one in [...]")
        grids = np.zeros((0, 3), np.int64) if image_grid_thw is None else np.asarray(image_grid_thw, np.int64)
        if grids.ndim != 2 or grids.shape[1] != 3 or (grids.size and grids.min() < 1):
            raise UserInputError(f"image_grid_thw: expected positive ints of shape [num_images, 3], got {grids.tolist()}")
        m2 = self.merge_size ** 2
        bad = [i for i, (t, h, w) in enumerate(grids) if h % self.merge_size or w % self.merge_size]
        if bad:
            raise UserInputError(f"image_grid_thw: rows {bad} have h or w not divisible by merge_size={self.merge_size}")
        image_id = _token_id(self.tokenizer, IMAGE_PAD)
        video_id = self.tokenizer.convert_tokens_to_ids(VIDEO_PAD)

        encoded = [self._encode_one(conv, add_generation_prompt) for conv in conversations]
        n_placeholders = sum(ids.count(image_id) for ids, _ in encoded)
        if n_placeholders != len(grids):
            raise UserInputError(f"image count mismatch: the conversations contain {n_placeholders} image placeholders "
                             f"but image_grid_thw has {len(grids)} rows")
        rows, image = [], 0
        for ids, mask in encoded:
            if video_id is not None and video_id in ids:
                raise UserInputError("videos are not supported by ChatEncoder (found a <|video_pad|> placeholder)")
            out_ids, out_mask = [], []
            for tok, tgt in zip(ids, mask):
                if tok == image_id:
                    n = int(np.prod(grids[image])) // m2
                    out_ids += [image_id] * n
                    out_mask += [False] * n  # image tokens are never targets
                    image += 1
                else:
                    out_ids.append(tok)
                    out_mask.append(tgt)
            rows.append((out_ids, out_mask))

        longest = max(len(ids) for ids, _ in rows)
        if max_length is not None and longest > max_length:
            raise UserInputError(f"max_length: a conversation has {longest} tokens, more than max_length={max_length}")
        length = max_length if max_length is not None else longest
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = _token_id(self.tokenizer, "<|endoftext|>")
        input_ids = np.full((len(rows), length), pad_id, np.int32)
        attention_mask = np.zeros((len(rows), length), np.int32)
        target_mask = np.zeros((len(rows), length), bool)
        for b, (ids, mask) in enumerate(rows):
            sl = slice(0, len(ids)) if padding_side == "right" else slice(length - len(ids), length)
            input_ids[b, sl] = ids
            attention_mask[b, sl] = 1
            target_mask[b, sl] = mask
        return ChatEncoding(input_ids, attention_mask, target_mask, grids)
