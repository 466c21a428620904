"""OpenREAD CoT data: synthetic records from generated scenes (frame, targets, counterfactual judgements), LingoQA and
OmniDrive loaders on tiny layouts written in the test, and tokenized training examples."""
import json

import ml_collections
import numpy as np
import pytest

from jaxdrive.data import openread_cot as cot
from jaxdrive.eval.cot_format import extract_answer, is_well_formed
from jaxdrive.eval.trajectory_text import parse_trajectory
from jaxdrive.scene import StateIndex


@pytest.fixture(scope="module")
def records():
    return cot.synthetic_records(12, seed=3)


def test_synthetic_records_are_well_formed_and_cover_the_three_tasks(records):
    tasks = {r["task"] for r in records}
    assert tasks == {cot.KNOWLEDGE, cot.PLANNING, cot.COUNTERFACTUAL}
    for r in records:
        assert is_well_formed(r["target"]), r["target"]
        assert extract_answer(r["target"]) == r["answer"]
        if r["task"] == cot.PLANNING:
            np.testing.assert_allclose(parse_trajectory(r["target"]), r["trajectory"], atol=1e-9)


def test_planning_answer_is_the_human_future_in_the_text_frame():
    """x forward, y left: rotate the logged human future into the ego frame at t = 0 independently and compare."""
    from jaxdrive.data.synthetic import generate_scene

    scene = generate_scene(5, num_proposals=4)
    f = cot.scene_facts(scene)
    rec = cot.planning_record(scene, f)
    ego = scene.history_states[-1]
    h = ego[StateIndex.HEADING]
    d = scene.human_states[[5, 10, 15, 20, 25, 30], :2] - ego[:2]
    forward = d[:, 0] * np.cos(h) + d[:, 1] * np.sin(h)
    left = -d[:, 0] * np.sin(h) + d[:, 1] * np.cos(h)
    np.testing.assert_allclose(rec["trajectory"], np.round(np.stack([forward, left], -1), 2), atol=1e-9)
    assert forward[-1] > 0  # driving forwards
    lateral = left[-1]
    expect = "Turn Left" if lateral > 2 else "Turn Right" if lateral < -2 else "Go Straight"
    assert f"navigation command is {expect}" in rec["question"]


def test_counterfactual_judgements_follow_the_generator_labels(records):
    cf = [r for r in records if r["task"] == cot.COUNTERFACTUAL]
    assert cf and all(r["answer"].startswith(("Yes.", "No.")) for r in cf)
    for r in cf:
        assert parse_trajectory(r["question"]) is not None  # the pseudo trajectory is in the question
    from jaxdrive.data.synthetic import generate_scene

    scene = generate_scene(0, num_proposals=16)
    f = cot.scene_facts(scene)
    bad = [k for k, fam in enumerate(scene.proposal_families) if fam in ("leave_road", "wrong_way", "accel_hard")]
    for k in bad:
        assert cot.counterfactual_record(scene, f, k)["answer"].startswith("No.")


def test_lingoqa_loader_on_a_tiny_parquet_layout(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "action").mkdir()
    (tmp_path / "evaluation").mkdir()
    pq.write_table(pa.table({"question_id": ["q1"], "segment_id": ["s1"], "question": ["Why slow down?"],
                             "answer": ["A cyclist ahead."], "images": [["images/s1/0.jpg", "images/s1/1.jpg"]],
                             "rationale": ["The cyclist is 10 m ahead in our lane."]}), tmp_path / "action" / "train.parquet")
    pq.write_table(pa.table({"question_id": ["q2"], "segment_id": ["s2"], "question": ["What colour is the light?"],
                             "answers": [["Red.", "It is red."]], "images": [["images/s2/0.jpg"]]}),
                   tmp_path / "evaluation" / "val.parquet")
    recs = {r["id"]: r for r in cot.load_lingoqa(tmp_path)}
    a, e = recs["lingoqa/action/q1"], recs["lingoqa/evaluation/q2"]
    assert a["task"] == cot.KNOWLEDGE and a["answer"] == "A cyclist ahead."
    assert "The cyclist is 10 m ahead" in a["target"] and is_well_formed(a["target"])
    assert a["images"][0].endswith("images/s1/0.jpg")
    assert e["answer"] == "Red." and e["references"] == ["Red.", "It is red."]
    with pytest.raises(ValueError, match="no parquet"):
        cot.load_lingoqa(tmp_path / "missing")


def _lingoqa_layout(root, val: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "action").mkdir()
    (root / "evaluation").mkdir()
    pq.write_table(pa.table({"question_id": ["q1"], "segment_id": ["s1"], "question": ["Why slow down?"],
                             "answer": ["A cyclist ahead."], "images": [["images/s1/0.jpg"]]}),
                   root / "action" / "train.parquet")
    pq.write_table(pa.table(val), root / "evaluation" / "val.parquet")


def test_lingoqa_evaluation_rows_make_one_record_and_training_does_not_see_them(tmp_path):
    """LingoQA's evaluation parquet has one row per reference answer (its own scripts group them by question_id):
    one record with every answer as a reference. The training recipe reads the train split only (it used to train on
    the evaluation set, one record per answer under a repeated id)."""
    from jaxdrive.train.openread_recipe import lingoqa_dataset
    from jaxdrive.train.openread_tiny import train_tokenizer

    _lingoqa_layout(tmp_path, {"question_id": ["e1", "e1", "e2"], "segment_id": ["s3", "s3", "s4"],
                               "question": ["Any cyclists?", "Any cyclists?", "Light?"],
                               "answer": ["No.", "None.", "Red."], "images": [[], [], []]})
    val = cot.load_lingoqa(tmp_path, split="val")
    assert [(r["id"], r["answer"], r["references"]) for r in val] == [
        ("lingoqa/evaluation/e1", "No.", ["No.", "None."]), ("lingoqa/evaluation/e2", "Red.", ["Red."])]
    assert [r["id"] for r in cot.load_lingoqa(tmp_path, split="train")] == ["lingoqa/action/q1"]
    tok = train_tokenizer(["Why slow down? A cyclist ahead."], vocab_size=300)
    exs = lingoqa_dataset(ml_collections.ConfigDict(dict(root=str(tmp_path), system_prompt="")), tok)
    assert [e["id"] for e in exs] == ["lingoqa/action/q1"]
    with pytest.raises(ValueError, match="split"):
        cot.load_lingoqa(tmp_path, split="test")


@pytest.mark.parametrize("val,needle", [
    ({"question_id": ["e1"], "question": ["Light?"], "answers": [[]]}, "row 0: field 'answer'/'answers'"),
    ({"question_id": ["e1"], "question": ["Light?"], "answer": [None]}, "row 0: field 'answer'/'answers'"),
    ({"question_id": ["e1", "e2"], "question": ["Light?", " "], "answer": ["Red.", "Red."]}, "row 1: fields"),
    ({"question_id": ["e1", "e1"], "question": ["Light?", "Cars?"], "answer": ["Red.", "Two."]}, "repeats"),
    ({"question": ["Light?"], "answer": ["Red."]}, "'question_id'"),
])
def test_lingoqa_malformed_rows_are_named_errors(tmp_path, val, needle):
    """Empty or missing answers, empty questions, a reused question_id and a missing column name the file and row
    (they were an IndexError, the text 'None' as the answer, or a silently repeated id)."""
    _lingoqa_layout(tmp_path, val)
    with pytest.raises(ValueError, match="val.parquet") as e:
        cot.load_lingoqa(tmp_path)
    assert needle in str(e.value)


@pytest.mark.parametrize("rel", ["/data/lingoqa/images/s3/0.jpg", "../images/s3/0.jpg", "images/../../0.jpg"])
def test_lingoqa_image_paths_outside_the_root_are_named_errors(tmp_path, rel):
    """Frame paths must be relative to the LingoQA root and stay inside it: an absolute or '..' path was loaded (and
    failed later without a file or row, or read an image from elsewhere); the error names the file, row, question
    and path."""
    _lingoqa_layout(tmp_path, {"question_id": ["e1", "e2"], "question": ["Light?", "Cars?"],
                               "answer": ["Red.", "Two."], "images": [["images/s3/0.jpg"], ["images/s4/0.jpg", rel]]})
    with pytest.raises(ValueError, match="relative to") as e:
        cot.load_lingoqa(tmp_path)
    where = f"{tmp_path / 'evaluation' / 'val.parquet'} row 1 (question_id 'e2')"
    assert f"{where}: field 'images': {rel!r}" in str(e.value)


def test_omnidrive_loader_on_a_tiny_json_layout(tmp_path):
    d = tmp_path / "vqa" / "train"
    d.mkdir(parents=True)
    (d / "tok1.json").write_text(json.dumps([
        {"question": "Please plan the trajectory for the ego car.",
         "answer": "Keep lane at constant speed: (1.5, 0.0), (3.0, 0.0), (4.5, -0.1), (6.0, -0.1), (7.5, -0.2), (9, -0.2)"},
        {"question": "If I follow the trajectory [(1.0, 0.0), (2.0, 3.0)], what happens?", "answer": "You would hit the curb."},
        {"question": "What is in front of the ego car?", "answer": "A bus."},
    ]))
    recs = cot.load_omnidrive(tmp_path, "train", kinds=("vqa",))
    assert [r["task"] for r in recs] == [cot.PLANNING, cot.COUNTERFACTUAL, cot.KNOWLEDGE]
    plan = recs[0]
    assert plan["think"] == "Keep lane at constant speed"
    np.testing.assert_allclose(plan["trajectory"][-1], [9.0, -0.2])
    (d / "bad.json").write_text("[{\"q\": 1}]")
    with pytest.raises(ValueError, match="bad.json"):
        cot.load_omnidrive(tmp_path, "train", kinds=("vqa",))


def test_omnidrive_planning_answer_in_its_pt_notation():
    """OmniDrive writes trajectories as '[PT, (+x, +y), ...]': the think part is the text before that, without the
    '[PT,' that used to end it."""
    pts = ", ".join(f"(+{2.5 * k:.2f}, -0.{k}0)" for k in range(1, 7))
    r = cot._omnidrive_qa("Please provide the planning trajectory for the ego car.",
                          f"Here is the planning trajectory [PT, {pts}].", "omnidrive/conv/t/0")
    assert r["task"] == cot.PLANNING and r["think"] == "Here is the planning trajectory"
    np.testing.assert_allclose(r["trajectory"][-1], [15.0, -0.6])


def test_training_examples_from_the_tiny_tokenizer(tmp_path):
    """Chat-template prompts and targets ending in the end-of-turn token; rewards' fields present; an SFT example fits."""
    from jaxdrive.train.openread_recipe import synthetic_dataset
    from jaxdrive.train.openread_tiny import EOS_ID, train_tokenizer

    recs = cot.synthetic_records(6, seed=1)
    tok = train_tokenizer([r["question"] + "\n" + r["target"] for r in recs], vocab_size=400)
    assert tok.convert_tokens_to_ids("<|im_end|>") == EOS_ID
    assert len(tok.encode("<think>", add_special_tokens=False)) == 1
    cfg = ml_collections.ConfigDict(dict(num_scenes=6, seed=1, system_prompt=""))
    exs = synthetic_dataset(cfg, tok)
    assert len(exs) == len(recs)
    for e, r in zip(exs, recs):
        assert e["answer"][-1] == EOS_ID
        assert tok.decode(e["answer"][:-1]) == r["target"]
        assert tok.decode(e["prompt"]).endswith("<|im_start|>assistant\n")
        assert e["reference"] == r["answer"] and e["task"] == r["task"]
    with pytest.raises(ValueError, match="needs a tokenizer"):
        synthetic_dataset(cfg, None)


def test_tiny_tokenizer_gives_each_digit_its_own_token():
    """The tiny policy's tokenizer splits digits one per token (as Qwen's does), so every trajectory point is the same
    token template, and it decodes trajectory text back exactly."""
    from jaxdrive.train.openread_tiny import train_tokenizer

    recs = cot.synthetic_records(4, seed=2)
    tok = train_tokenizer([r["question"] + "\n" + r["target"] for r in recs], vocab_size=400)
    text = "<answer> (13.37, -0.05), (26.42, 0.00) </answer>"
    ids = tok.encode(text, add_special_tokens=False)
    pieces = [tok.decode([i]) for i in ids]
    assert [p for p in pieces if any(c.isdigit() for c in p)] == list("1337" "005" "2642" "000")
    assert tok.decode(ids) == text


def test_constant_speed_planning_variant_follows_from_the_prompt():
    """planning="constant_speed": the target is (v t, 0) at t = 0.5 .. 3 s for the velocity stated in the prompt, one of
    RULE_SPEEDS, all of which occur; command Go Straight; knowledge records are unchanged; unknown variants fail."""
    import re

    recs = cot.synthetic_records(16, seed=4, tasks=(cot.PLANNING, cot.KNOWLEDGE), planning="constant_speed")
    plan = [r for r in recs if r["task"] == cot.PLANNING]
    assert len(plan) == 16
    speeds = set()
    for r in plan:
        v = float(re.search(r"current velocity is ([0-9.]+) m/s", r["question"]).group(1))
        speeds.add(v)
        assert "navigation command is Go Straight" in r["question"] and "acceleration speed is 0.00" in r["question"]
        expect = np.stack([v * 0.5 * np.arange(1, 7), np.zeros(6)], -1)
        np.testing.assert_allclose(r["trajectory"], expect, atol=1e-9)
        np.testing.assert_allclose(parse_trajectory(r["target"]), expect, atol=1e-9)
        assert is_well_formed(r["target"])
    assert speeds == set(cot.RULE_SPEEDS)
    logged = cot.synthetic_records(16, seed=4, tasks=(cot.KNOWLEDGE,))
    assert [r["target"] for r in recs if r["task"] == cot.KNOWLEDGE] == [r["target"] for r in logged]
    with pytest.raises(ValueError, match="planning"):
        cot.synthetic_records(2, seed=4, planning="straight")


def test_critic_pairs_and_their_sft_examples(tmp_path):
    """Each knowledge record gives a matching pair (its own answer) and a non-matching one (another scene's different
    answer to the same kind of question); the SFT examples are the critic prompt as QwenCritic renders it + yes/no."""
    from jaxdrive.eval.critic import render_prompt
    from jaxdrive.train.openread_recipe import critic_pairs_dataset
    from jaxdrive.train.openread_tiny import EOS_ID, train_tokenizer

    recs = cot.synthetic_records(10, seed=5, tasks=(cot.KNOWLEDGE,))
    pairs = cot.critic_pairs(recs, seed=5)
    assert sum(p["match"] for p in pairs) == len(recs) and len(pairs) > len(recs)
    kinds = {r["answer"]: r["id"].rsplit("/", 1)[-1] for r in recs}
    for p in pairs:
        assert (p["prediction"] == p["reference"]) == p["match"]
        assert kinds[p["prediction"]] == kinds[p["reference"]]
    tok = train_tokenizer([r["question"] + "\n" + r["target"] for r in recs], vocab_size=400)
    exs = critic_pairs_dataset(ml_collections.ConfigDict(dict(num_scenes=10, seed=5, critic_max_len=96)), tok)
    assert [e["match"] for e in exs] == [p["match"] for p in pairs]
    for e in exs:
        assert list(e["prompt"]) == render_prompt(tok, e["question"], e["reference"], e["prediction"], max_len=96)
        assert tok.decode(e["answer"][:-1]) == ("yes" if e["match"] else "no") and e["answer"][-1] == EOS_ID


def test_pair_separation_known_answers():
    """pair_separation's class means, accuracy at the threshold and AUC (ties half) on a stub critic with fixed
    probabilities; all-one-class pairs are refused."""
    from jaxdrive.eval.critic import pair_separation

    class Stub:
        def __init__(self, p):
            self.p = np.asarray(p, np.float64)

        def probabilities(self, questions, references, predictions):
            assert len(questions) == len(references) == len(predictions) == len(self.p)
            return self.p

    pairs = [dict(question="q", reference="r", prediction="x", match=m) for m in (True, True, True, False, False)]
    out = pair_separation(Stub([0.9, 0.6, 0.3, 0.3, 0.1]), pairs)
    assert out["pairs"] == 5
    assert out["p_yes_match"] == pytest.approx(0.6) and out["p_yes_mismatch"] == pytest.approx(0.2)
    assert out["accuracy"] == pytest.approx(4 / 5)  # 0.3 (match) falls below 0.5
    assert out["auc"] == pytest.approx((5 + 0.5) / 6)  # 6 (pos, neg) pairs: 5 ordered right, 1 tie
    with pytest.raises(ValueError, match="both"):
        pair_separation(Stub([0.9, 0.8]), pairs[:2])
