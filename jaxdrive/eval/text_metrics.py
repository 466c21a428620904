"""LingoQA-style text metrics through maintained libraries, all offline: BLEU (sacrebleu), METEOR (pycocoevalcap's
Meteor 1.5, a bundled Java jar: needs a ``java`` on PATH), CIDEr (pycocoevalcap's CIDEr-D, pure Python), and a
Lingo-Judge-style accuracy from an LLM critic (``eval.critic.QwenCritic``: correct when p(match) > 0.5).

What does not run offline: LingoQA's own Lingo-Judge (a classifier fetched from the Hugging Face hub) and the HF
``evaluate`` CIDEr LingoQA's script loads from the hub; the critic score stands in for the former, pycocoevalcap's
CIDEr-D for the latter. Inputs: ``predictions`` [N] strings and ``references`` [N] lists of strings (one or more
references per prediction). Text is lower-cased and split on non-alphanumerics before CIDEr / METEOR (the COCO PTB
tokenizer is Java too; this keeps CIDEr Java-free).
"""
from __future__ import annotations

import re
import shutil
from typing import Sequence

import numpy as np

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _check(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> list[list[str]]:
    if len(predictions) != len(references):
        raise ValueError(f"references: expected {len(predictions)} lists (one per prediction), got {len(references)}")
    refs = [[r] if isinstance(r, str) else list(r) for r in references]
    if any(not r for r in refs):
        raise ValueError("references: every prediction needs at least one reference")
    return refs


def tokenize(text: str) -> str:
    """Lower-cased words joined by spaces."""
    return " ".join(_WORD.findall(str(text).lower()))


def bleu(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Corpus BLEU-4 in [0, 100] (sacrebleu, its default 13a tokenisation, exponential smoothing)."""
    import sacrebleu

    refs = _check(predictions, references)
    k = max(len(r) for r in refs)
    streams = [[r[i] if i < len(r) else r[0] for r in refs] for i in range(k)]  # sacrebleu: one stream per slot
    return float(sacrebleu.corpus_bleu(list(predictions), streams).score)


def cider(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Corpus CIDEr-D (pycocoevalcap; document frequencies from these references; x10 scale as COCO reports)."""
    from pycocoevalcap.cider.cider import Cider

    refs = _check(predictions, references)
    gts = {i: [tokenize(x) for x in r] for i, r in enumerate(refs)}
    res = {i: [tokenize(p)] for i, p in enumerate(predictions)}
    score, _ = Cider().compute_score(gts, res)
    return float(score)


def meteor(predictions: Sequence[str], references: Sequence[Sequence[str]], per_sample: bool = False):
    """Corpus METEOR 1.5 (pycocoevalcap's bundled jar; raises if no ``java`` is installed); with ``per_sample``,
    (corpus score, [N] per-prediction scores)."""
    if shutil.which("java") is None:
        raise RuntimeError("METEOR needs a Java runtime on PATH (pycocoevalcap runs meteor-1.5.jar)")
    from pycocoevalcap.meteor.meteor import Meteor

    refs = _check(predictions, references)
    gts = {i: [tokenize(x) for x in r] for i, r in enumerate(refs)}
    res = {i: [tokenize(p)] for i, p in enumerate(predictions)}
    scorer = Meteor()  # one JVM per call; pycocoevalcap kills it when the wrapper is collected
    score, scores = scorer.compute_score(gts, res)
    del scorer
    return (float(score), np.asarray(scores, np.float64)) if per_sample else float(score)


def judge_accuracy(critic, questions: Sequence[str], predictions: Sequence[str],
                   references: Sequence[Sequence[str]], threshold: float = 0.5) -> float:
    """Lingo-Judge-style accuracy: a prediction is correct when the critic's p(match) with any reference exceeds
    ``threshold``."""
    refs = _check(predictions, references)
    rows = [(q, r, p) for q, p, rs in zip(questions, predictions, refs) for r in rs]
    probs = critic.probabilities(*map(list, zip(*rows))) if rows else np.zeros(0)
    best, k = [], 0
    for rs in refs:
        best.append(float(np.max(probs[k : k + len(rs)])))
        k += len(rs)
    return float(np.mean(np.asarray(best) > threshold)) if best else 0.0


def text_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]], *, questions=None, critic=None,
                 with_meteor: bool = True) -> dict:
    """{"bleu", "cider", "meteor" (when requested and Java is present, else absent), "judge" (with a critic)}."""
    out = {"bleu": bleu(predictions, references), "cider": cider(predictions, references)}
    if with_meteor and shutil.which("java"):
        out["meteor"] = meteor(predictions, references)
    if critic is not None:
        out["judge"] = judge_accuracy(critic, questions or [""] * len(predictions), predictions, references)
    return out
