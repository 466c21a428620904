"""The tiny recipe: a tiny random Qwen2.5-VL and synthetic multimodal tasks for tests, smoke runs and benchmarks,
registered in ``jaxdrive.train.registry`` (datasets "tiny_memorise" / "tiny_bright", decoder "tiny_words").

No tokenizer or download: token ids are fixed (``TOKENS``) and decoded through a small word table, which is all a
verifiable reward needs. Images are ``IMAGE_SIZE`` x ``IMAGE_SIZE`` RGB, i.e. ``IMAGE_PATCHES`` patches of
``PATCH_DIM`` values (grid t=1, h=w=IMAGE_SIZE/PATCH) and ``IMAGE_TOKENS`` image-pad tokens after 2x2 merging.

Tasks (each example: ``prompt`` ids [P], ``answer`` ids [A], ``pixel_values`` [IMAGE_PATCHES, PATCH_DIM],
``image_grid_thw`` [1, 3], ``answer_text``):
  * ``memorise_examples``: a random image and a random answer sequence per example; the prompt text is the same for
    all, so only the image tells the answers apart (a multimodal memorisation set for SFT).
  * ``bright_examples``: "is the image bright?" with answer "yes" iff the pixels were shifted up (a verifiable
    yes/no task for GRPO).
"""
from __future__ import annotations

import numpy as np
from flax import nnx

from jaxdrive.errors import UserInputError
from jaxdrive.models.config import parse_config
from jaxdrive.models.vlm import QwenModel

TOKENS = dict(pad=0, eos=1, vision_start=2, vision_end=3, image=4, yes=5, no=6, question=7, bright=8)
VOCAB = 48
WORDS = {TOKENS["yes"]: "yes", TOKENS["no"]: "no", TOKENS["question"]: "is", TOKENS["bright"]: "bright"}
PATCH, MERGE, IMAGE_SIZE = 4, 2, 8
PATCH_DIM = 3 * PATCH * PATCH
IMAGE_PATCHES = (IMAGE_SIZE // PATCH) ** 2
IMAGE_TOKENS = IMAGE_PATCHES // MERGE**2

TINY_CONFIG = {
    "model_type": "qwen2_5_vl", "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0, "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]},
    "tie_word_embeddings": False, "image_token_id": TOKENS["image"], "vision_start_token_id": TOKENS["vision_start"],
    "eos_token_id": TOKENS["eos"],
    "vision_config": {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "in_channels": 3,
                      "patch_size": PATCH, "spatial_merge_size": MERGE, "temporal_patch_size": 1,
                      "window_size": 2 * PATCH * MERGE, "out_hidden_size": 32, "fullatt_block_indexes": [0]},
}


def tiny_vlm(seed: int = 0) -> QwenModel:
    """A float32 random tiny Qwen2.5-VL (hidden 32, 2 layers, vocab 48, 1-block vision tower)."""
    return QwenModel(parse_config(TINY_CONFIG), rngs=nnx.Rngs(seed))


def decode(ids, mask=None) -> str:
    """Words of the valid, non-special tokens, up to the first eos (unknown ids as ``<id>``)."""
    words = []
    for i, t in enumerate(np.asarray(ids).tolist()):
        if (mask is not None and not mask[i]) or t == TOKENS["eos"]:
            break
        words.append(WORDS.get(t, f"<{t}>"))
    return " ".join(words)


def _prompt() -> list[int]:
    return ([TOKENS["vision_start"]] + [TOKENS["image"]] * IMAGE_TOKENS + [TOKENS["vision_end"]]
            + [TOKENS["question"], TOKENS["bright"]])


def _example(prompt, answer, pixels) -> dict:
    return {"prompt": np.asarray(prompt, np.int32), "answer": np.asarray(answer, np.int32),
            "pixel_values": pixels.astype(np.float32), "image_grid_thw": np.asarray([[1, 2, 2]], np.int64),
            "answer_text": decode(answer)}


def memorise_examples(n: int, answer_len: int = 3, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        answer = list(rng.integers(TOKENS["bright"] + 1, VOCAB, answer_len)) + [TOKENS["eos"]]
        out.append(_example(_prompt(), answer, rng.standard_normal((IMAGE_PATCHES, PATCH_DIM))))
    return out


def bright_examples(n: int, seed: int = 0, shift: float = 1.0) -> list[dict]:
    """Balanced yes/no: pixels ~ N(+shift, 1) for "yes", N(-shift, 1) for "no"."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        bright = i % 2 == 0
        pixels = rng.standard_normal((IMAGE_PATCHES, PATCH_DIM)) + (shift if bright else -shift)
        out.append(_example(_prompt(), [TOKENS["yes" if bright else "no"], TOKENS["eos"]], pixels))
    return [out[i] for i in rng.permutation(n)]


def shuffle_answers(examples: list[dict], seed: int = 0) -> list[dict]:
    """The same examples with answers drawn at random from the answer set: teaches the answer format, not the task."""
    rng = np.random.default_rng(seed)
    answers = [e["answer"] for e in examples]
    return [dict(e, answer=answers[j], answer_text=decode(answers[j])) for e, j in
            zip(examples, rng.integers(0, len(answers), len(answers)))]


def warm_vs_zero_configs(grpo_steps: int, sft_steps: int = 40, workdir: str = ""):
    """(format-SFT config, GRPO config) of the SFT-warm-start vs zero-shot GRPO comparison on the bright task.

    The warm start is SFT on the bright prompts with *shuffled* answers: it teaches the answer format ("yes"/"no"
    then eos) at chance accuracy, so any accuracy gain after it is GRPO's."""
    import importlib

    def load(name):
        return importlib.import_module(f"jaxdrive.configs.{name}").get_config()

    s = load("sft_tiny")
    s.steps, s.batch_size, s.progress, s.log_every = sft_steps, 16, False, 10
    s.data.kind, s.data.num_examples, s.data.shuffle_labels, s.data.max_len = "tiny_bright", 64, True, 8
    s.optim.lr, s.checkpoint.enabled = 1e-2, False
    g = load("grpo_tiny")
    g.steps, g.progress, g.workdir = grpo_steps, False, workdir
    g.checkpoint.enabled = False
    return s, g


# Registry factories (``jaxdrive.train.registry``): the tiny token-id recipes need no tokenizer.

def memorise_dataset(cfg, tokenizer=None) -> list[dict]:
    """``data.kind = "tiny_memorise"``: ``num_examples``, ``answer_len``, ``seed``."""
    del tokenizer
    return memorise_examples(cfg.num_examples, cfg.get("answer_len", 3), cfg.seed)


def bright_dataset(cfg, tokenizer=None) -> list[dict]:
    """``data.kind = "tiny_bright"``: ``num_examples``, ``seed``; ``shuffle_labels`` gives a format-only set."""
    del tokenizer
    exs = bright_examples(cfg.num_examples, cfg.seed)
    return shuffle_answers(exs, cfg.seed + 1) if cfg.get("shuffle_labels", False) else exs


def words_decoder(cfg=None, tokenizer=None):
    """``decoder.kind = "tiny_words"``: the tiny word table (``decode``)."""
    del cfg, tokenizer
    return decode


def tokenizer_decoder(cfg, tokenizer):
    """``decoder.kind = "tokenizer"``: the pretrained model's tokenizer; stops at the first masked slot, special
    tokens skipped (``cfg.skip_special_tokens``, default True)."""
    if tokenizer is None:
        raise UserInputError("decoder.kind='tokenizer' needs a pretrained model directory with a tokenizer (model.path)")
    skip = cfg.get("skip_special_tokens", True) if cfg is not None else True

    def fn(ids, mask=None) -> str:
        ids = np.asarray(ids)
        if mask is not None:
            m = np.asarray(mask).astype(bool)
            stop = int(np.argmin(m)) if not m.all() else len(ids)
            ids = ids[:stop]
        return tokenizer.decode(ids.tolist(), skip_special_tokens=skip)

    return fn
