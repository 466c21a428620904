"""Tiny OpenREAD components for tests and CPU smoke runs: a random tiny Qwen3 critic with the byte-level test
tokenizer (plumbing only: its judgements are noise)."""
from __future__ import annotations

import tempfile

from flax import nnx

from jaxdrive.eval.critic import QwenCritic


def tiny_critic(seed: int = 0, **kw) -> QwenCritic:
    """A float32 random tiny Qwen3 (hidden 64, 2 layers, vocab 1000) and the test tokenizer as a ``QwenCritic``."""
    from jaxdrive.models import QwenModel, parse_config
    from jaxdrive.models.testing import tiny_hf_config
    from jaxdrive.models.tokenizer_testing import build_test_tokenizer

    model = QwenModel(parse_config(tiny_hf_config("qwen3").to_dict()), rngs=nnx.Rngs(seed))
    return QwenCritic(model, build_test_tokenizer(tempfile.mkdtemp(prefix="jaxdrive-tiny-critic-")), **kw)
