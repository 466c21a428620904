"""VQA scorers against the test vectors of shared/spec/eval-protocols.md §C and hand-computed cases."""
import math

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
    d = [{"output": _wrap("10"), "xyz1": [3, 0, 4], "xyz2": [0, 0, 0]}, {"output": _wrap("ten"), "xyz1": [3, 0, 4]}]
    assert vqa.drivemllm_task_score("dA", d)["score"] == round(100 / (1 + 0.05 * 5), 2)
    assert vqa.drivemllm_task_score("dz", d)["score"] == round(100 / (1 + 0.05 * 6), 2)
    assert vqa.drivemllm_task_score("dAB", d)["score"] == round(100 / (1 + 0.05 * 5), 2)
    assert vqa.drivemllm_task_score("dx", d)["score"] == round(100 / (1 + 0.05 * 7), 2)
    assert vqa.drivemllm_task_score("dx", [])["score"] == 0.0
    out = vqa.drivemllm({"xy": xy, "left": lr, "right": lr, "front": fb, "behind": fb})
    cols = out["columns"]
    assert cols["L/R"] == 50.0 and cols["F/B"] == 50.0 and cols["BBox"] == 0.0
    assert cols["AccS"] == pytest.approx(sum(cols[c] for c in vqa.PAPER_COLUMNS) / 8)


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
    assert math.isnan(vqa.stsbench(rows[:3])["average"])
    with pytest.raises(ValueError, match="group"):
        vqa.stsbench([{"answer": "A", "gt": "A", "group": "x", "scenario": "y"}])


def test_eval_vqa_cli(tmp_path, capsys):
    import json

    from jaxdrive.cli import main

    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"idx": "a_b_2", "response": "Final Answer: C) x", "gt": "Final Answer: C) x"}) + "\n")
    assert main(["eval", "vqa", "drivelmm", "--predictions", str(p)]) == 0
    assert json.loads(capsys.readouterr().out) == {"mcq_accuracy": 1.0, "mcq_items": 1}
    assert main(["eval", "vqa", "stsbench", "--predictions", str(p)]) == 2
    assert "lacks the field" in capsys.readouterr().err
