"""Tiny OpenREAD components for tests and CPU smoke runs.

* ``build_tiny_policy(DIR)``: a random tiny Qwen3 text model and a small byte-level BPE tokenizer trained on the
  synthetic CoT corpus (Qwen chat template and special tokens; ``<think>``, ``</think>``, ``<answer>``, ``</answer>``
  as single added tokens), written as an HF directory that ``model.kind = "pretrained"`` loads. Command line:
  ``python -m jaxdrive.train.openread_tiny DIR``.
* ``tiny_critic()``: a random tiny Qwen3 with the test tokenizer as a ``QwenCritic`` (plumbing only: its judgements
  are noise).
"""
from __future__ import annotations

import argparse
import os
import tempfile

from flax import nnx

from jaxdrive.eval.cot_format import SYSTEM_PROMPT, TAGS
from jaxdrive.eval.critic import QwenCritic
from jaxdrive.models.tokenizer_testing import QWEN_SPECIAL_TOKENS, QWEN_VL_CHAT_TEMPLATE

#: ids of the tiny policy tokenizer's special tokens (the trainer's pad / eos).
PAD_ID = QWEN_SPECIAL_TOKENS.index("<|endoftext|>")
EOS_ID = QWEN_SPECIAL_TOKENS.index("<|im_end|>")


def train_tokenizer(texts: list[str], vocab_size: int = 1024):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts`` (special tokens first, ids 0..6; every digit
    its own token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # digits split one per token, as Qwen's own pre-tokenizer does: the 6-point trajectory text is then one fixed
    # template of digit slots that a tiny policy learns in a few hundred SFT steps (learnt merges of digit runs made
    # "(3.37, 0.00)" an irregular token sequence that it never learnt to close after exactly 6 points)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(QWEN_SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens(list(TAGS))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=QWEN_VL_CHAT_TEMPLATE)


def build_tiny_policy(path: str, *, seed: int = 0, vocab_size: int = 1024, num_scenes: int = 200, hidden: int = 96,
                      layers: int = 3):
    """Writes the tiny policy directory (weights, config, tokenizer) to ``path``; returns (model, tokenizer)."""
    from jaxdrive.data.openread_cot import synthetic_records
    from jaxdrive.models import QwenModel, parse_config
    from jaxdrive.models.weights import save_pretrained

    records = synthetic_records(num_scenes, seed)
    tokenizer = train_tokenizer([SYSTEM_PROMPT] + [r["question"] + "\n" + r["target"] for r in records], vocab_size)
    vocab = -(-len(tokenizer) // 64) * 64
    cfg = dict(model_type="qwen3", vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
               num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4,
               rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=True, eos_token_id=EOS_ID,
               pad_token_id=PAD_ID, max_position_embeddings=1024,
               rope_parameters=dict(rope_type="default", rope_theta=10000.0))
    model = QwenModel(parse_config(cfg), rngs=nnx.Rngs(seed))
    os.makedirs(path, exist_ok=True)
    save_pretrained(model, path)
    tokenizer.save_pretrained(path)
    return model, tokenizer


def tiny_critic(seed: int = 0, **kw) -> QwenCritic:
    """A float32 random tiny Qwen3 (hidden 64, 2 layers, vocab 1000) and the test tokenizer as a ``QwenCritic``."""
    from jaxdrive.models import QwenModel, parse_config
    from jaxdrive.models.testing import tiny_hf_config
    from jaxdrive.models.tokenizer_testing import build_test_tokenizer

    model = QwenModel(parse_config(tiny_hf_config("qwen3").to_dict()), rngs=nnx.Rngs(seed))
    return QwenCritic(model, build_test_tokenizer(tempfile.mkdtemp(prefix="jaxdrive-tiny-critic-")), **kw)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxdrive.train.openread_tiny", description=__doc__.split("\n\n")[0])
    p.add_argument("path", help="output directory (HF layout: config.json, model.safetensors, tokenizer files)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--num-scenes", type=int, default=200, help="synthetic scenes of the tokenizer's training corpus")
    args = p.parse_args(argv)
    _, tok = build_tiny_policy(args.path, seed=args.seed, vocab_size=args.vocab_size, num_scenes=args.num_scenes)
    print(f"wrote tiny OpenREAD policy ({len(tok)} tokens) to {args.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
