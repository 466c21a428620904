"""LingoQA-style text metrics, all offline: BLEU as OpenREAD's LingoQA evaluation computes it (HF ``evaluate``'s
``bleu``, re-implemented here), METEOR (pycocoevalcap's Meteor 1.5, a bundled Java jar: needs a ``java`` on PATH),
CIDEr (pycocoevalcap's CIDEr-D, pure Python), and a Lingo-Judge-style accuracy from an LLM critic
(``eval.critic.QwenCritic``: correct when p(match) > 0.5).

Inputs: ``predictions`` [N] strings and ``references`` [N] lists of strings (one or more references per prediction).
Where these differ from OpenREAD's LingoQA script (``shared/spec/eval-protocols.md``, OpenREAD):

* Lingo-Judge: LingoQA's classifier is fetched from the Hugging Face hub; the critic score stands in for it.
* CIDEr: the script loads HF ``evaluate``'s "Kamichanw/CIDEr" from the hub: Stanford CoreNLP's PTB tokenizer (Java,
  lower-cased, punctuation tokens dropped), then pycocoevalcap's CiderScorer (n = 4, sigma = 6), the scorer used here.
  ``tokenize`` stands in for the PTB tokenizer, written to agree with it on words, numbers ("3.5", "1,000"),
  hyphenated words and the clitics PTB splits off ("is n't", "light 's"), but not checked against it; it splits
  abbreviations ("e.g.") and URLs, which PTB keeps whole.
* METEOR: the same scorer on the same stripped strings, with runs of whitespace (newlines too) joined into one space:
  the jar reads one line per segment, so a newline inside an answer would break the reference's own call.
"""
from __future__ import annotations

import collections
import math
import re
import shutil
from typing import Sequence

import numpy as np

from jaxdrive.errors import UserInputError

# Numbers with decimal / thousands separators, then words of Unicode letters and digits with inner hyphens/apostrophes.
_WORD = re.compile(r"\d+(?:[.,]\d+)+|[^\W_]+(?:[-'][^\W_]+)*")
_CLITIC = re.compile(r"(.+?)(n't|'(?:s|re|ve|ll|d|m))$")  # the endings the PTB tokenizer splits off


def _check(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> list[list[str]]:
    """The references as lists, after checking one non-empty list per prediction and at least one prediction (an
    empty corpus gave BLEU 0, judge accuracy 0 and a CIDEr 'max() arg is an empty sequence')."""
    if len(predictions) == 0:
        raise UserInputError("predictions: expected at least one prediction, got none (the scores are undefined)")
    if len(predictions) != len(references):
        raise UserInputError(f"references: expected {len(predictions)} lists (one per prediction), got {len(references)}")
    refs = [[r] if isinstance(r, str) else list(r) for r in references]
    if any(not r for r in refs):
        raise UserInputError("references: every prediction needs at least one reference")
    return refs


def tokenize(text: str) -> str:
    """Lower-cased words joined by spaces, PTB-like (the CIDEr tokenisation): Unicode words, numbers with their
    separators kept whole, punctuation dropped, clitics split off ("isn't" -> "is n't")."""
    words = []
    for w in _WORD.findall(str(text).lower().replace("\u2019", "'")):
        m = _CLITIC.fullmatch(w)
        words.extend(m.groups() if m else (w,))
    return " ".join(words)


def _ngrams(tokens: Sequence[str], max_order: int) -> collections.Counter:
    return collections.Counter(tuple(tokens[i : i + n]) for n in range(1, max_order + 1)
                               for i in range(len(tokens) - n + 1))


def bleu(predictions: Sequence[str], references: Sequence[Sequence[str]], max_order: int = 4) -> float:
    """Corpus BLEU in [0, 100], as HF ``evaluate.load("bleu")`` (tensorflow/nmt ``compute_bleu``) x 100: sacrebleu's
    13a tokenisation (case kept), n-gram counts clipped by the maximum over the references, no smoothing (0 when any
    order has no match), brevity penalty against the sum of each prediction's *shortest* reference length."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    refs = _check(predictions, references)
    tok = Tokenizer13a()
    matches, possible, hyp_len, ref_len = [0] * max_order, [0] * max_order, 0, 0
    for p, rs in zip(predictions, refs):
        hyp, ref_toks = tok(p).split(), [tok(r).split() for r in rs]
        hyp_len += len(hyp)
        ref_len += min(len(r) for r in ref_toks)
        best = collections.Counter()
        for r in ref_toks:
            best |= _ngrams(r, max_order)
        for gram, count in (_ngrams(hyp, max_order) & best).items():
            matches[len(gram) - 1] += count
        for n in range(1, max_order + 1):
            possible[n - 1] += max(len(hyp) - n + 1, 0)
    precisions = [m / p if p else 0.0 for m, p in zip(matches, possible)]
    if min(precisions) == 0 or hyp_len == 0 or ref_len == 0:
        return 0.0
    brevity = min(1.0, math.exp(1 - ref_len / hyp_len))
    return 100 * brevity * math.exp(sum(math.log(p) for p in precisions) / max_order)


def cider(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Corpus CIDEr-D (pycocoevalcap; document frequencies from these references; x10 scale as COCO reports)."""
    from pycocoevalcap.cider.cider import Cider

    refs = _check(predictions, references)
    gts = {i: [tokenize(x) for x in r] for i, r in enumerate(refs)}
    if not any(x for r in gts.values() for x in r):  # pycocoevalcap: "max() arg is an empty sequence"
        raise UserInputError("references: no reference has a word, CIDEr's document frequencies are undefined")
    res = {i: [tokenize(p)] for i, p in enumerate(predictions)}
    score, _ = Cider().compute_score(gts, res)
    return float(score)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def meteor(predictions: Sequence[str], references: Sequence[Sequence[str]], per_sample: bool = False):
    """Corpus METEOR 1.5 in [0, 1] on the raw strings, stripped and on one line (pycocoevalcap's bundled jar, which
    lower-cases and tokenises itself; raises if no ``java`` is installed); with ``per_sample``, (corpus score, [N]
    per-prediction scores)."""
    if shutil.which("java") is None:
        raise RuntimeError("METEOR needs a Java runtime on PATH (pycocoevalcap runs meteor-1.5.jar)")
    from pycocoevalcap.meteor.meteor import Meteor

    refs = _check(predictions, references)
    gts = {i: [_one_line(x) for x in r] for i, r in enumerate(refs)}
    res = {i: [_one_line(p)] for i, p in enumerate(predictions)}
    scorer = Meteor()  # one JVM per call; pycocoevalcap kills it when the wrapper is collected
    score, scores = scorer.compute_score(gts, res)
    del scorer
    return (float(score), np.asarray(scores, np.float64)) if per_sample else float(score)


def judge_accuracy(critic, questions: Sequence[str], predictions: Sequence[str],
                   references: Sequence[Sequence[str]], threshold: float = 0.5) -> float:
    """Lingo-Judge-style accuracy: a prediction is correct when the critic's p(match) with any reference exceeds
    ``threshold``."""
    refs = _check(predictions, references)
    if len(questions) != len(predictions):  # zip cut the rows short and misaligned the references' scores
        raise UserInputError(f"questions: expected {len(predictions)} (one per prediction), got {len(questions)}")
    rows = [(q, r, p) for q, p, rs in zip(questions, predictions, refs) for r in rs]
    probs = critic.probabilities(*map(list, zip(*rows)))
    best, k = [], 0
    for rs in refs:
        best.append(float(np.max(probs[k : k + len(rs)])))
        k += len(rs)
    return float(np.mean(np.asarray(best) > threshold))


def text_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]], *, questions=None, critic=None,
                 with_meteor: bool = True) -> dict:
    """{"bleu", "cider", "meteor" (when requested and Java is present, else absent), "judge" (with a critic)}."""
    out = {"bleu": bleu(predictions, references), "cider": cider(predictions, references)}
    if with_meteor and shutil.which("java"):
        out["meteor"] = meteor(predictions, references)
    if critic is not None:
        out["judge"] = judge_accuracy(critic, questions or [""] * len(predictions), predictions, references)
    return out
