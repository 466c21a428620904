"""The text fields of a trajectory record (``jaxdrive.agent.loop.run_episode``): ``scene_id``, ``stm`` and
``reasoning`` strings, ``gold`` a string or null (an item without a gold answer). ``jaxdrive memory consolidate``
refused other types of ``question`` and tool names only: a number, list, object or null ``scene_id`` / ``stm`` /
``reasoning`` / ``gold`` was turned into text (``str()``: "None", "['...']") and stored in the memory; and the loop
itself wrote a model's non-string ``reasoning`` as it came."""
import json

import numpy as np
import pytest

from jaxdrive.cli import main


def _store(tmp_path):
    from jaxdrive.agent.store import MemoryEntry, MemoryStore, save

    save(MemoryStore([MemoryEntry("r1", "a stopped car ahead")], np.eye(1, 384, dtype=np.float32)), tmp_path / "m")
    return str(tmp_path / "m")


def _traj(**change):
    """A verified trajectory (it would be extracted into the memory) with ``change`` applied."""
    return {"id": "t0", "scene_id": "s", "question": "What now? A) Brake B) Go", "gold": "A", "correct": True,
            "termination": "finish", "stm": "ego: v=5.0m/s\nrisk: none",
            "reasoning": "The car ahead is stopped, so braking is right.",
            "steps": [{"action": {"tool": "get_ego_states", "arguments": {}}, "ok": True, "update": "u"}], **change}


@pytest.mark.parametrize("field,value,want", [
    ("scene_id", 7, "a scene id (string), got int"),
    ("scene_id", None, "a scene id (string), got NoneType"),
    ("stm", ["ego: v=5.0m/s"], "the serialised short-term memory (string), got list"),
    ("stm", {"ego": 5}, "the serialised short-term memory (string), got dict"),
    ("reasoning", ["Step 1: brake"], "the answer's reasoning (string), got list"),
    ("reasoning", 3.5, "the answer's reasoning (string), got float"),
    ("reasoning", None, "the answer's reasoning (string), got NoneType"),
    ("gold", 1, "the gold answer (string) or null, got int"),
    ("gold", ["A"], "the gold answer (string) or null, got list"),
    ("gold", {"letter": "A"}, "the gold answer (string) or null, got dict"),
])
def test_consolidate_refuses_text_fields_of_another_type(tmp_path, capsys, monkeypatch, field, value, want):
    from jaxdrive.agent import embed
    from jaxdrive.agent.store import load

    monkeypatch.setattr(embed, "minilm", lambda: pytest.fail("the embedder was loaded"))
    store = _store(tmp_path)
    good = _traj(id="t-good")
    (tmp_path / "t.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(_traj(**{field: value})) + "\n")
    assert main(["memory", "consolidate", "--store", store, "--trajectories", str(tmp_path / "t.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert f"{tmp_path / 't.jsonl'}:2: field {field!r}: expected {want}" in err, err
    assert load(store).consolidated == [] and len(load(store).entries) == 1


def test_an_item_without_gold_is_consolidated_without_an_answer():
    """A null ``gold`` (the loop's record of an item without one) is its type; the entry's answer is "" (was
    "None")."""
    from jaxdrive.agent.consolidate import check_verified_fields, extract

    traj = _traj(gold=None)
    check_verified_fields(traj, "t.jsonl:1")
    assert extract(traj).answer == ""
    assert extract(_traj()).answer == "A"


@pytest.mark.parametrize("reasoning,want", [
    (["Step 1: the lead car stopped.", "Step 2: brake."], '["Step 1: the lead car stopped.", "Step 2: brake."]'),
    ({"step": "brake"}, '{"step": "brake"}'),
    (None, ""),
    ("Step 1: brake.", "Step 1: brake."),
])
def test_the_loop_writes_reasoning_as_text(reasoning, want):
    """A model's answer with a non-string ``reasoning`` was written as it came (a list, an object, null), so the record
    did not have its documented type (and consolidation now refuses it)."""
    from jaxdrive.agent.loop import run_episode
    from jaxdrive.agent.tools import ToolContext, default_registry
    from jaxdrive.data.synthetic import generate_scene

    replies = iter([{"think": "speed?", "action": {"tool": "get_ego_states", "arguments": {}}},
                    {"update": "known", "think": "done", "finish": True, "reasoning": reasoning,
                     "final_answer": "A) Brake"}])
    ctx = ToolContext.from_scene(generate_scene(0, num_proposals=1))
    t = run_episode(lambda messages: json.dumps(next(replies)), ctx, default_registry(),
                    {"id": "q", "question": "What now? A) Brake B) Go", "gold": "A"})
    assert t["termination"] == "finish" and t["reasoning"] == want


def test_consolidate_names_the_trajectory_of_a_wrong_field():
    """Called as a library (no file), consolidation names the trajectory id and the field, before embedding."""
    from jaxdrive.agent.consolidate import consolidate
    from jaxdrive.agent.store import MemoryStore

    store = MemoryStore([], np.zeros((0, 384), np.float32))
    with pytest.raises(ValueError, match=r"trajectory 't7': field 'stm': expected the serialised short-term memory"):
        consolidate(store, [_traj(), _traj(id="t7", stm=5)], lambda texts: pytest.fail("embedded"))
