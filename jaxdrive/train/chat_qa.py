"""``data.kind = "chat_qa"``: image + question -> short answer, rendered with the pretrained model's own chat template.

The dataset behind ``jaxdrive train`` for a model directory (``model.kind = "pretrained"``): the same config trains a
tiny random model on CPU and Qwen2.5-VL / Qwen3-VL on a pod, because tokens, chat template, image token ids and patch
geometry all come from the model directory (its tokenizer, ``preprocessor_config.json`` or else ``config.json``'s
``vision_config``).

Records come from ``data.path``, a JSONL file with one object per line::

    {"question": "What colour is the car?", "answer": "red", "image": "imgs/0001.png", "system": "..."}

(``image`` relative to the file, optional but present in every record or in none; ``system`` optional), or, when
``data.path`` is empty, from a synthetic colour set: ``num_examples`` solid-colour images (seeded by ``seed``) asking
"What colour is the image?" with the answer among ``COLOURS``. Every image is resized to ``image_size`` x
``image_size`` pixels (a multiple of patch_size * merge_size) so all examples share one shape (one compile).

Each example: ``prompt`` int32 [P] (the conversation up to ``<|im_start|>assistant\\n``), ``answer`` int32 [A] (the
assistant tokens, closing ``<|im_end|>`` included), ``answer_text``, and ``pixel_values`` [N, C*T*P*P] /
``image_grid_thw`` [1, 3] when there is an image.
"""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import PIL.Image

from jaxdrive.errors import UserInputError
from jaxdrive.models.chat import ChatEncoder
from jaxdrive.models.config import read_json_object
from jaxdrive.models.image_processing import ImageProcessorConfig, preprocess_images, read_preprocessor_config

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 60), "blue": (40, 60, 230), "yellow": (230, 220, 40)}
QUESTION = "What colour is the image? Answer with one word."


def model_directory(tokenizer) -> str:
    """The pretrained model directory the tokenizer was loaded from (``name_or_path``)."""
    path = getattr(tokenizer, "name_or_path", "")
    if not path or not os.path.isdir(path):
        raise UserInputError("data.kind='chat_qa' needs the tokenizer of a pretrained model directory (model.kind="
                         f"'pretrained', model.path=DIR); got a tokenizer from {path!r}")
    return path


def image_config(path: str, image_size: int) -> ImageProcessorConfig:
    """Patch geometry and normalisation of the model at ``path``, resizing every image to ``image_size``^2 pixels."""
    cfg = read_preprocessor_config(path)
    if cfg is None:
        raw = read_json_object(os.path.join(path, "config.json"))
        vision = raw.get("vision_config")
        if vision is None:
            raise UserInputError(f"data.kind='chat_qa': {path} is a text-only model (no vision_config) and images were asked for")
        qwen3 = raw.get("model_type") == "qwen3_vl"
        cfg = ImageProcessorConfig(
            patch_size=int(vision.get("patch_size", 16 if qwen3 else 14)),
            temporal_patch_size=int(vision.get("temporal_patch_size", 2)),
            merge_size=int(vision.get("spatial_merge_size", 2)),
            **(dict(image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5)) if qwen3 else {}))
    unit = cfg.patch_size * cfg.merge_size
    if image_size <= 0 or image_size % unit:
        raise UserInputError(f"data.image_size: expected a positive multiple of patch_size * merge_size = {unit}, "
                         f"got {image_size}")
    return dataclasses.replace(cfg, min_pixels=image_size**2, max_pixels=image_size**2)


def read_records(path: str) -> list[dict]:
    """Records of a chat_qa JSONL file (images resolved relative to it); errors name the line and the field."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"data.path: no such file {path}")
    records = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserInputError(f"data.path {path}:{i}: not JSON ({e.msg})") from None
            for key in ("question", "answer"):
                if not isinstance(r.get(key), str):
                    raise UserInputError(f"data.path {path}:{i}: field {key!r} must be a string")
            if "image" in r:
                r["image"] = os.path.join(os.path.dirname(os.path.abspath(path)), r["image"])
            records.append(r)
    if not records:
        raise UserInputError(f"data.path {path}: no records")
    if len({"image" in r for r in records}) > 1:
        raise UserInputError(f"data.path {path}: either every record has an 'image' or none does")
    return records


def synthetic_records(n: int, seed: int) -> list[dict]:
    """``n`` solid-colour images (with a little pixel noise) and the question about their colour."""
    rng = np.random.default_rng(seed)
    names = list(COLOURS)
    out = []
    for i in range(n):
        name = names[rng.integers(len(names))]
        pixels = np.clip(np.asarray(COLOURS[name]) + rng.normal(0, 12, (32, 32, 3)), 0, 255).astype(np.uint8)
        out.append({"question": QUESTION, "answer": name, "image": PIL.Image.fromarray(pixels)})
    return out


def encode_record(encoder: ChatEncoder, record: dict, processor: ImageProcessorConfig | None) -> dict:
    """One example (see the module docstring) from a record, via the chat template."""
    content = ([{"type": "image"}] if "image" in record else []) + [{"type": "text", "text": record["question"]}]
    messages = ([{"role": "system", "content": record["system"]}] if "system" in record else [])
    messages += [{"role": "user", "content": content}, {"role": "assistant", "content": record["answer"]}]
    example = {"answer_text": record["answer"]}
    grid = None
    if "image" in record:
        image = record["image"]
        image = PIL.Image.open(image) if isinstance(image, str) else image
        side = int(np.sqrt(processor.max_pixels))
        pixels, grid = preprocess_images([image.convert("RGB").resize((side, side), PIL.Image.BICUBIC)], processor)
        example.update(pixel_values=pixels, image_grid_thw=grid)
    enc = encoder.encode([messages], grid)
    ids, where = enc.input_ids[0], np.flatnonzero(enc.target_mask[0])
    if not where.size or (np.diff(where) != 1).any():
        raise UserInputError(f"chat template: the assistant answer {record['answer']!r} is not one span of tokens")
    example.update(prompt=ids[:where[0]].astype(np.int32), answer=ids[where].astype(np.int32))
    return example


def chat_qa_dataset(cfg, tokenizer) -> list[dict]:
    """Registry factory ``data.kind = "chat_qa"``: ``path`` (JSONL, or "" for the synthetic colour set),
    ``num_examples`` and ``seed`` (synthetic set), ``image_size`` (pixels; default 448)."""
    if tokenizer is None:
        raise UserInputError("data.kind='chat_qa' needs a pretrained model directory with a tokenizer (model.path)")
    path = model_directory(tokenizer)
    records = read_records(cfg.path) if cfg.get("path") else synthetic_records(cfg.num_examples, cfg.get("seed", 0))
    processor = image_config(path, cfg.get("image_size", 448)) if "image" in records[0] else None
    encoder = ChatEncoder(tokenizer, processor.merge_size if processor else 2)
    return [encode_record(encoder, r, processor) for r in records]
