"""LingoQA-style text metrics: BLEU (sacrebleu), CIDEr-D (pycocoevalcap), METEOR (pycocoevalcap + Java) and the
critic-based judge accuracy, with known answers and orderings."""
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
    shuffled = M.bleu(PRED[::-1], REFS)
    assert 0 < shuffled < good < 100


def test_cider_orders_exact_paraphrase_unrelated():
    exact = M.cider([r[0] for r in REFS], REFS)
    para = M.cider(PRED, REFS)
    wrong = M.cider(PRED[::-1], REFS)
    assert exact > para > wrong >= 0
    # document frequencies come from the references: in a one-sample corpus every n-gram has idf log(1/1) = 0
    assert M.cider(["a b c d e f"], [["a b c d e f"]]) == pytest.approx(0.0, abs=1e-9)


def test_tokenize_and_input_checks():
    assert M.tokenize("The Light's RED, isn't it?") == "the light's red isn't it"
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


@pytest.mark.slow  # starts a JVM and loads METEOR's paraphrase table
@pytest.mark.skipif(shutil.which("java") is None, reason="METEOR needs a Java runtime")
def test_meteor_known_values():
    """One JVM: exact copies of the references score ~1, paraphrases less, swapped answers least."""
    preds = [r[0] for r in REFS] + PRED + PRED[::-1]
    _, per = M.meteor(preds, REFS * 3, per_sample=True)
    exact, para, wrong = per[:3], per[3:6], per[6:]
    assert (exact > 0.95).all() and (para < exact).all() and (para > 0.2).all()
    assert wrong.mean() < para.mean()
