"""LingoQA-style text metrics: BLEU (HF ``evaluate``'s, as OpenREAD's LingoQA script), CIDEr-D (pycocoevalcap),
METEOR (pycocoevalcap + Java) and the critic-based judge accuracy, with known answers and orderings."""
import math
import shutil

import numpy as np
import pytest

from jaxdrive.eval import text_metrics as M

PRED = ["the car ahead is braking so i slow down", "there is a red traffic light", "a cyclist is on the left"]
REFS = [["the car in front is braking so i should slow down"], ["the traffic light is red", "red light ahead"],
        ["there is a cyclist on the left side"]]


def test_bleu_known_values():
    assert M.bleu(["a b c d e"], [["a b c d e"]]) == pytest.approx(100.0)
    assert M.bleu(["x y z w"], [["a b c d e"]]) == pytest.approx(0.0, abs=1e-6)
    good = M.bleu(PRED, REFS)
    assert 0 < good < 100 and M.bleu(PRED[::-1], REFS) < good


def test_bleu_is_hf_evaluates_not_sacrebleus():
    """HF ``evaluate.load("bleu")`` (tensorflow/nmt ``compute_bleu`` on 13a tokens), as OpenREAD's LingoQA script
    computes it, x 100; hand-computed. sacrebleu's BLEU gave 20.557 and 29.348 on the first two."""
    # no smoothing: no 4-gram in common is 0 ("Yes , there is" ... vs "Yes , a pedestrian" ...)
    assert M.bleu(["Yes, there is a pedestrian."], [["Yes, a pedestrian is crossing."]]) == 0.0
    # 13a tokens, case kept; clipped matches per order over the corpus: 14/17, 8/14, 4/11, 1/9; lengths 17 vs the
    # shortest references 2 + 8 + 3 = 13, so no brevity penalty
    multi = M.bleu(["Yes.", "No, the light is red.", "Slow down because the lead car brakes."],
                   [["Yes.", "Yes, it is."], ["No, the traffic light is red."],
                    ["I slow down because the car in front is braking.", "Slowing down."]])
    assert multi == pytest.approx(100 * (14 / 17 * 8 / 14 * 4 / 11 * 1 / 9) ** 0.25)
    assert multi == pytest.approx(37.134, abs=5e-4)
    # brevity penalty against the shortest reference (5 tokens), not the closest (9: 100 exp(1 - 9/8) = 88.25)
    assert M.bleu(["a b c d e f g h"], [["a b c d e", "a b c d e f g h i"]]) == pytest.approx(100.0)
    assert M.bleu(["the car is red"], [["the car is red now"]]) == pytest.approx(100 * math.exp(1 - 5 / 4))
    assert M.bleu([""], [["a b"]]) == 0.0


def test_cider_orders_exact_paraphrase_unrelated():
    exact = M.cider([r[0] for r in REFS], REFS)
    para = M.cider(PRED, REFS)
    wrong = M.cider(PRED[::-1], REFS)
    assert exact > para > wrong >= 0
    # document frequencies come from the references: in a one-sample corpus every n-gram has idf log(1/1) = 0
    assert M.cider(["a b c d e f"], [["a b c d e f"]]) == pytest.approx(0.0, abs=1e-9)


def test_tokenize_and_input_checks():
    """PTB-like (the reference CIDEr's tokenizer): clitics split, numbers whole, Unicode words kept."""
    assert M.tokenize("The Light's RED, isn't it?") == "the light 's red is n't it"
    assert M.tokenize("Keep 3.5 m/s; 1,000 cars.") == "keep 3.5 m s 1,000 cars"
    assert M.tokenize("Müller’s café: a left-turn lane") == "müller 's café a left-turn lane"
    with pytest.raises(ValueError, match="references"):
        M.bleu(PRED, REFS[:2])
    with pytest.raises(ValueError, match="at least one"):
        M.cider(["a"], [[]])


class KeywordCritic:
    def probabilities(self, questions, references, predictions):
        return np.asarray([0.8 if set(r.split()) & set(p.split()) >= {"red"} or "cyclist" in p and "cyclist" in r
                           else 0.1 for r, p in zip(references, predictions)])


def test_judge_accuracy_takes_the_best_reference():
    acc = M.judge_accuracy(KeywordCritic(), ["q"] * 3, PRED, REFS)
    assert acc == pytest.approx(2 / 3)  # red light (2nd reference set) and cyclist count; the braking one does not


def test_text_metrics_bundle():
    out = M.text_metrics(PRED, REFS, questions=["q"] * 3, critic=KeywordCritic(), with_meteor=False)
    assert set(out) == {"bleu", "cider", "judge"} and out["judge"] == pytest.approx(2 / 3)


def test_meteor_gets_the_raw_strings(monkeypatch):
    """As the reference: stripped raw strings (METEOR's jar lower-cases and tokenises them), on one line each."""
    import pycocoevalcap.meteor.meteor as pm

    seen = {}

    class FakeMeteor:
        def compute_score(self, gts, res):
            seen.update(gts=gts, res=res)
            return 0.5, [0.5]

    monkeypatch.setattr(pm, "Meteor", FakeMeteor)
    monkeypatch.setattr(M.shutil, "which", lambda name: "/usr/bin/java")
    assert M.meteor([" Keep 3.5 m/s,\nthen stop. "], [["Müller’s café:  3.5"]]) == 0.5
    assert seen == {"gts": {0: ["Müller’s café: 3.5"]}, "res": {0: ["Keep 3.5 m/s, then stop."]}}


@pytest.mark.slow  # starts a JVM and loads METEOR's paraphrase table
@pytest.mark.skipif(shutil.which("java") is None, reason="METEOR needs a Java runtime")
def test_meteor_known_values():
    """One JVM: exact copies of the references score ~1, paraphrases less, swapped answers least."""
    preds = [r[0] for r in REFS] + PRED + PRED[::-1]
    _, per = M.meteor(preds, REFS * 3, per_sample=True)
    exact, para, wrong = per[:3], per[3:6], per[6:]
    assert (exact > 0.95).all() and (para < exact).all() and (para > 0.2).all()
    assert wrong.mean() < para.mean()


def test_empty_corpus_wordless_references_and_short_questions_are_errors():
    """An empty corpus scored BLEU 0 and judge accuracy 0 (not defined) and crashed CIDEr with pycocoevalcap's
    "max() arg is an empty sequence", as did references without a word; too few questions misaligned the critic's
    rows ("zero-size array to reduction operation")."""
    for metric in (M.bleu, M.cider):
        with pytest.raises(ValueError, match="at least one prediction"):
            metric([], [])
    with pytest.raises(ValueError, match="no reference has a word"):
        M.cider(["a car"], [["..."]])
    with pytest.raises(ValueError, match="at least one prediction"):
        M.judge_accuracy(KeywordCritic(), [], [], [])
    with pytest.raises(ValueError, match="questions: expected 3"):
        M.judge_accuracy(KeywordCritic(), ["q"], PRED, REFS)
