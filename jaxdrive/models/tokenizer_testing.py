"""A tiny offline tokenizer with the Qwen-VL special tokens and chat template, for tests and tiny random models.

Byte-level BPE with no merges: token id == byte value for ids 0..255 (GPT-2 byte-to-unicode alphabet, so any UTF-8
text round-trips), then the special tokens below. ``TEST_VOCAB_SIZE`` = 263: tiny models paired with it need
``vocab_size >= 263`` and should set ``image_token_id = 261``, ``video_token_id = 262``, ``vision_start_token_id =
259``, ``vision_end_token_id = 260``, ``eos_token_id = 258`` (``<|im_end|>``), ``pad_token_id = 256``.
"""
from __future__ import annotations

import os

QWEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                       "<|image_pad|>", "<|video_pad|>")
TEST_TOKEN_IDS = {tok: 256 + i for i, tok in enumerate(QWEN_SPECIAL_TOKENS)}
TEST_VOCAB_SIZE = 256 + len(QWEN_SPECIAL_TOKENS)

# The Qwen2-VL / Qwen2.5-VL chat template (as shipped in their checkpoints' chat_template.json).
QWEN_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode map (the ByteLevel pre-tokenizer's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def build_test_tokenizer(path: str):
    """Builds the tiny Qwen-style tokenizer, saves it (``save_pretrained``) to ``path`` and returns it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: byte for byte, ch in _bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(QWEN_SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=QWEN_VL_CHAT_TEMPLATE)
    for token, expected in TEST_TOKEN_IDS.items():
        assert fast.convert_tokens_to_ids(token) == expected, token
    os.makedirs(path, exist_ok=True)
    fast.save_pretrained(path)
    return fast
