"""VQA scorers against the test vectors of shared/spec/eval-protocols.md §C and hand-computed cases."""
import json

import pytest

from jaxdrive.eval import vqa


@pytest.mark.parametrize("text,letter", [
    ("**Final Answer**: E) Change lane to left.", "E"),
    ("Answer: (B) Speed up", "B"),
    ("The answer is C.", "none"),
    ("Final Answer: A. Slow down", "none"),
    ("Final Answer: none of the above", "F"),
    ("Answer: A) Slow down. Final Answer: D) Keep speed", "D"),
])
def test_drivelmm_letter_vectors(text, letter):
    assert vqa.drivelmm_letter(text) == letter


def test_drivelmm_markers_and_accuracy():
    # "Final Answer" precedes "**Final Answer**" in the marker list
    assert vqa.drivelmm_final_answer("**Final Answer**: E) x") == "**: E) x"
    assert vqa.drivelmm_final_answer("no marker") == ""
    assert vqa.drivelmm_final_answer("Answer 1 ... Answer 2") == " 2"  # text after the LAST occurrence
    tok = "e7ef871f" * 4 + "_" + "b10f0cd7" * 4
    rows = [{"idx": f"{tok}_2", "response": "Final Answer: B) Brake", "gt": "Final Answer: B) Brake"},
            {"idx": f"{tok}_3", "response": "Final Answer: A) Go", "gt": "Final Answer: B) Brake"},
            {"idx": f"{tok}_8", "response": "I would brake", "gt": "Final Answer: B) Brake"},  # no marker: wrong
            {"idx": f"{tok}_1", "response": "Final Answer: B) Brake", "gt": "Final Answer: B) Brake"}]  # not MCQ
    assert vqa.drivelmm_is_mcq(f"{tok}_5") and not vqa.drivelmm_is_mcq(f"{tok}_6")
    assert vqa.drivelmm_mcq(rows) == {"mcq_accuracy": 1 / 3, "mcq_items": 3}


def test_drivelmm_gt_is_the_datasets_final_answer():
    """The GT is the dataset's ``final_answer`` ("A) ..."), read without the marker step (the reference's
    ``extract_options(gt_final_answer)``): a correct response scores 1, a refusal 0."""
    tok = "e7ef871f77f44331aefdebc24ec034b7_b10f0cd792b64d16a1a5e8349b20504c"
    gt = "A) Slow down and assess the situation."
    correct = {"idx": f"{tok}_4", "response": "**Step-by-Step Reasoning**: ... **Final Answer**: " + gt, "gt": gt}
    refusal = {"idx": f"{tok}_5", "response": "I refuse to answer.", "gt": gt}
    assert vqa.drivelmm_mcq([correct]) == {"mcq_accuracy": 1.0, "mcq_items": 1}
    assert vqa.drivelmm_mcq([refusal]) == {"mcq_accuracy": 0.0, "mcq_items": 1}
    assert vqa.drivelmm_option(gt) == "A" and vqa.drivelmm_option("None of the above.") == "F"
    assert vqa.drivelmm_option("Slow down") == "none"
    assert vqa.drivelmm_mcq([{**refusal, "idx": f"{tok}_1"}]) == {"mcq_accuracy": None, "mcq_items": 0}


def test_drivelmm_bad_rows_name_row_and_field():
    with pytest.raises(ValueError, match=r"row 2: idx: expected '<scene>_<sample>_<question number>', got 'a_b_x'"):
        vqa.drivelmm_mcq([{"idx": "a_b_2", "response": "", "gt": ""}, {"idx": "a_b_x", "response": "", "gt": ""}])
    with pytest.raises(ValueError, match="row 1: lacks the field 'gt'"):
        vqa.drivelmm_mcq([{"idx": "a_b_2", "response": ""}])


def test_accs_matches_agentthink_gpt4o_row():
    cols = [91.72, 67.60, 9.58, 14.69, 40.90, 4.07, 46.11, 70.65]
    assert vqa.accs(cols) == pytest.approx(43.165)
    assert abs(vqa.accs(cols) - 43.16) < 0.01  # reported as 43.16
    with pytest.raises(ValueError):
        vqa.accs(cols[:7])


def _wrap(s):
    return f"blah <OUTPUT FORMAT START>{s}<OUTPUT FORMAT END>"


def test_drivemllm_tasks():
    xy = [{"output": _wrap("[100, 200]"), "gt": [103, 204]}, {"output": _wrap("[100, 2000]"), "gt": [0, 0]},
          {"output": "[1, 2]", "gt": [0, 0]}]
    r = vqa.drivemllm_task_score("xy", xy, expected=4)
    assert (r["valid"], r["matched"], r["total"]) == (1, 2, 3) and r["effective_ratio"] == 25.0
    assert r["score"] == round(100 / (1 + 0.005 * 5.0), 2)
    box = [{"output": _wrap("[0, 0, 10, 10]"), "gt": [5, 5, 15, 15]},
           {"output": _wrap("[0, 0, 10, 10]"), "gt": [0, 0, 10, 10]}]
    assert vqa.drivemllm_task_score("box", box)["score"] == round((25 / 175 + 1.0) / 2 * 100, 2)
    objs = [("red car", [300, 10]), ("white truck", [100, 10])]
    lr = [{"output": _wrap("the white truck"), "objects": objs, "descriptions": ["red car", "white truck"]},
          {"output": _wrap("red car"), "objects": objs, "descriptions": ["red car", "white truck"]},
          {"output": _wrap("a bus"), "objects": objs, "descriptions": ["red car", "white truck"]}]
    assert vqa.drivemllm_task_score("left", lr)["score"] == 50.0 and vqa.drivemllm_task_score("left", lr)["valid"] == 2
    assert vqa.drivemllm_task_score("right", lr)["score"] == 50.0
    tie = [{"output": _wrap("white truck"), "objects": [("red car", [5, 0]), ("white truck", [5, 0])],
            "descriptions": ["red car", "white truck"]}]
    assert vqa.drivemllm_task_score("left", tie)["score"] == 100.0  # ties go to object 2
    fb = [{"output": _wrap(" Yes "), "xyz1": [0, 0, 5], "xyz2": [0, 0, 9]}, {"output": _wrap("yes"), "xyz1": [0, 0, 5],
                                                                          "xyz2": [0, 0, 9]}]
    front = vqa.drivemllm_task_score("front", fb)
    assert front["score"] == 100.0 and front["valid"] == 1
    assert vqa.drivemllm_task_score("behind", fb)["score"] == 0.0
    d = [{"output": _wrap("10"), "xyz1": [3, 0, 4], "xyz2": [0, 0, 0]}, {"output": _wrap("ten"), "xyz1": [3, 0, 4],
                                                                    "xyz2": [0, 0, 0]}]
    assert vqa.drivemllm_task_score("dA", d)["score"] == round(100 / (1 + 0.05 * 5), 2)
    assert vqa.drivemllm_task_score("dz", d)["score"] == round(100 / (1 + 0.05 * 6), 2)
    assert vqa.drivemllm_task_score("dAB", d)["score"] == round(100 / (1 + 0.05 * 5), 2)
    assert vqa.drivemllm_task_score("dx", d)["score"] == round(100 / (1 + 0.05 * 7), 2)
    assert vqa.drivemllm_task_score("dx", [])["score"] == 0.0
    full = {"xy": xy, "box": box, "left": lr, "right": lr, "front": fb, "behind": fb, "dA": d, "dz": d, "dAB": d,
            "dx": d}
    cols = vqa.drivemllm(full)["columns"]
    assert cols["L/R"] == 50.0 and cols["F/B"] == 50.0
    assert cols["AccS"] == vqa.accs([cols[c] for c in vqa.PAPER_COLUMNS])


def test_drivemllm_absent_tasks_are_not_zeros():
    """A task with no rows is None, not a 0 averaged into AccS; L/R needs both left and right."""
    xy = [{"output": _wrap("[100, 200]"), "gt": [103, 204]}]
    fb = [{"output": _wrap("Yes"), "xyz1": [0, 0, 5], "xyz2": [0, 0, 9]}]
    left = [{"output": _wrap("red car"), "objects": [("red car", [1, 0]), ("bus", [5, 0])],
             "descriptions": ["red car", "bus"]}]
    out = vqa.drivemllm({"xy": xy, "front": fb, "behind": fb, "left": left, "box": []})
    assert out["tasks"]["box"] is None and out["tasks"]["right"] is None
    assert out["columns"]["BBox"] is None and out["columns"]["L/R"] is None
    assert out["accs_columns"] == ["PPos", "F/B"]
    assert out["columns"]["AccS"] == pytest.approx((round(100 / (1 + 0.005 * 5.0), 2) + 50.0) / 2)
    assert out["missing_tasks"] == ["box", "right", "dA", "dz", "dAB", "dx"]
    assert vqa.drivemllm({})["columns"]["AccS"] is None


def test_drivemllm_missing_or_malformed_field_is_an_error():
    """A left/right row without ``descriptions`` was counted as an invalid answer."""
    objs = [("red car", [10, 5]), ("bus", [50, 5])]
    ok = {"output": _wrap("the red car"), "objects": objs, "descriptions": ["red car", "bus"]}
    assert vqa.drivemllm_task_score("left", [ok])["score"] == 100.0
    with pytest.raises(ValueError, match="row 2: lacks the field 'descriptions'"):
        vqa.drivemllm_task_score("left", [ok, {"output": _wrap("the red car"), "objects": objs}])
    with pytest.raises(ValueError, match="row 1: xyz2: expected a list of at least 3 numbers"):
        vqa.drivemllm_task_score("dx", [{"output": _wrap("1"), "xyz1": [1, 2, 3], "xyz2": [1, 2]}])
    with pytest.raises(ValueError, match="row 1: objects: expected"):
        vqa.drivemllm_task_score("right", [{**ok, "objects": objs[:1]}])
    with pytest.raises(ValueError, match="row 1: gt: expected list, got str"):
        vqa.drivemllm_task_score("xy", [{"output": _wrap("[1, 2]"), "gt": "1, 2"}])
    with pytest.raises(ValueError, match="unknown task"):
        vqa.drivemllm({"up": [ok]})


def test_stsbench_first_letter_macro():
    rows = [{"answer": "a) turn", "gt": "A", "group": "ego", "scenario": "turn"},
            {"answer": "B", "gt": "A", "group": "ego", "scenario": "turn"},
            {"answer": "C because", "gt": "c", "group": "ego", "scenario": "stop"},
            {"answer": " A", "gt": "A", "group": "agent", "scenario": "cross"},  # leading space: first char wrong
            {"answer": "", "gt": "A", "group": "ego-agent", "scenario": "follow"},
            {"answer": "D", "gt": "D", "group": "agent-agent", "scenario": "overtake"}]
    r = vqa.stsbench(rows)
    assert r["types"]["ego"] == {"turn": 0.5, "stop": 1.0}
    assert r["groups"] == {"ego": 0.75, "agent": 0.0, "ego-agent": 0.0, "agent-agent": 1.0}
    assert r["average"] == pytest.approx(1.75 / 4)
    assert vqa.stsbench(rows[:3])["average"] is None
    with pytest.raises(ValueError, match="row 1: group"):
        vqa.stsbench([{"answer": "A", "gt": "A", "group": "x", "scenario": "y"}])
    with pytest.raises(ValueError, match="row 2: answer: expected str, got int"):
        vqa.stsbench([rows[0], {**rows[0], "answer": 5}])
    with pytest.raises(ValueError, match=r"row 2: gt: expected the letter of one of the 5 options \(A-E\)"):
        vqa.stsbench([rows[0], {**rows[0], "gt": "?"}])
    with pytest.raises(ValueError, match=r"row 1: gt: expected the letter .*, got 'Ego turns left'"):
        vqa.stsbench([{**rows[0], "gt": "Ego turns left"}])  # a text, not an option letter
    assert vqa.stsbench([{**rows[0], "answer": ""}])["types"]["ego"] == {"turn": 0.0}  # any answer is scored
    assert vqa.stsbench([{**rows[0], "answer": "B", "gt": "b) stop"}])["types"]["ego"] == {"turn": 1.0}


def test_eval_vqa_cli(tmp_path, capsys):
    from jaxdrive.cli import main

    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"idx": "a_b_2", "response": "Final Answer: C) x", "gt": "Final Answer: C) x"}) + "\n")
    assert main(["eval", "vqa", "drivelmm", "--predictions", str(p)]) == 0
    assert json.loads(capsys.readouterr().out) == {"mcq_accuracy": 1.0, "mcq_items": 1}
    assert main(["eval", "vqa", "stsbench", "--predictions", str(p)]) == 2
    assert f"{p}:1: lacks the field 'answer'" in capsys.readouterr().err


def _strict_json(text):
    def no_constant(name):
        raise AssertionError(f"not JSON: {name}")
    return json.loads(text, parse_constant=no_constant)


@pytest.mark.parametrize("benchmark,rows,key,warning", [
    ("stsbench", [{"answer": "A", "gt": "A", "group": "ego", "scenario": "turn"}], "average", "agent-agent"),
    ("drivelmm", [{"idx": "a_b_1", "response": "A", "gt": "A"}], "mcq_accuracy", "no MCQ item"),
])
def test_eval_vqa_cli_writes_null_not_nan(tmp_path, capsys, benchmark, rows, key, warning):
    from jaxdrive.cli import main

    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", "vqa", benchmark, "--predictions", str(p)]) == 0
    cap = capsys.readouterr()
    assert _strict_json(cap.out)[key] is None and warning in cap.err


def test_eval_vqa_cli_drivemllm_nan_answer_and_missing_tasks(tmp_path, capsys):
    from jaxdrive.cli import main

    p = tmp_path / "p.jsonl"
    rows = [{"task": "xy", "output": _wrap("[100, 200]"), "gt": [103, 204]},
            {"task": "dA", "output": _wrap("nan"), "xyz1": [1, 2, 3]}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", "vqa", "drivemllm", "--predictions", str(p)]) == 0
    cap = capsys.readouterr()
    out = _strict_json(cap.out)
    assert out["tasks"]["dA"]["score"] is None and out["columns"]["CVD"] is None and out["tasks"]["box"] is None
    assert "no rows for task(s)" in cap.err and "tasks.dA.score" in cap.err


@pytest.mark.parametrize("benchmark,line,message", [
    ("stsbench", '{"answer": 5, "gt": "A", "group": "ego", "scenario": "turn"}', ":2: answer: expected str, got int"),
    ("stsbench", "[1, 2]", ":2: expected a JSON object, got list"),
    # an invalid ground truth was scored as a wrong answer without a word (a prediction may be anything)
    ("stsbench", '{"answer": "A", "gt": "", "group": "ego", "scenario": "turn"}',
     ":2: gt: expected the letter of one of the 5 options (A-E), got ''"),
    ("stsbench", '{"answer": "F", "gt": "F", "group": "ego", "scenario": "turn"}',
     ":2: gt: expected the letter of one of the 5 options (A-E), got 'F'"),
    ("stsbench", '{"answer": "A", "gt": " A", "group": "ego", "scenario": "turn"}',
     ":2: gt: expected the letter of one of the 5 options (A-E), got ' A'"),
    ("drivemllm", "[1, 2]", ":2: expected a JSON object, got list"),
    ("drivelmm", '{"idx": "a_b_x", "response": "A", "gt": "A"}', ":2: idx: expected"),
    ("drivemllm", '{"task": "left", "output": "x", "objects": [["a", [1, 2]], ["b", [3, 4]]]}',
     ":2: lacks the field 'descriptions'"),
    ("drivemllm", '{"task": "up", "output": "x"}', ":2: task: expected one of"),
    ("drivelmm", "not json", ":2: not JSON"),  # this line and a list's named the file but not the flag
])
def test_eval_vqa_cli_bad_rows_are_one_line_errors(tmp_path, capsys, benchmark, line, message):
    from jaxdrive.cli import main

    p = tmp_path / "p.jsonl"
    p.write_text("\n" + line + "\n")  # a blank first line: the error names the file's line, not the row's rank
    assert main(["eval", "vqa", benchmark, "--predictions", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"--predictions {p}{message}" in err and err.count("\n") == 1 and "Traceback" not in err
