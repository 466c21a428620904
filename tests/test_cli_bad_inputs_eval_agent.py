"""Bad input to `jaxdrive eval`, `jaxdrive agent` and `jaxdrive memory` is a usage error (exit 2) with one line naming
the flag, file, line or field, found before the run's work: each case below was a traceback (exit 1), an error that
did not name its file, or a silent wrong result."""
import json

import numpy as np
import pytest

from jaxdrive.cli import main


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def _planning_files(tmp_path):
    """A two-sample --gt file (no obstacles) and its --predictions file."""
    gt = np.cumsum(np.ones((2, 6, 2)), axis=1)
    np.savez(tmp_path / "gt.npz", gt=gt, occupancy=np.zeros((2, 6, 200, 200), bool), tokens=np.array(["a", "b"]))
    np.savez(tmp_path / "pred.npz", pred=gt + 0.5)
    return str(tmp_path / "pred.npz"), str(tmp_path / "gt.npz")


def _dqc_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"score": [0.2, 0.9], "label": [0, 1]}), tmp_path / "p.parquet")
    return str(tmp_path / "p.parquet")


@pytest.mark.parametrize("where", ["a directory", "in a missing folder"])
@pytest.mark.parametrize("command", ["agent run", "agent convert", "eval planning", "eval dqc"])
def test_output_path_is_checked_before_the_run(tmp_path, capsys, command, where):
    """An output file that is an existing directory, or whose folder does not exist, was a traceback after the whole
    run (every agent episode lost; `eval dqc` had already written P.dqc.json)."""
    out = tmp_path / "outdir" if where == "a directory" else tmp_path / "missing" / "out.file"
    (tmp_path / "outdir").mkdir()
    if command == "agent run":
        argv, flag = ["agent", "run", "--scenes", "1", "--out", str(out)], "--out"
    elif command == "agent convert":
        (tmp_path / "t.jsonl").write_text(json.dumps({"id": "t0", "messages": []}) + "\n")
        argv, flag = ["agent", "convert", "--trajectories", str(tmp_path / "t.jsonl"), "--phase", "1",
                      "--out", str(out)], "--out"
    elif command == "eval planning":
        pred, gt = _planning_files(tmp_path)
        argv, flag = ["eval", "planning", "--predictions", pred, "--gt", gt, "--json", str(out)], "--json"
    else:
        argv, flag = ["eval", "dqc", "--predictions", _dqc_file(tmp_path), "--plot", str(out)], "--plot"
    assert main(argv) == 2
    err = _err(capsys)
    assert f"{flag} {out}: " in err and err.count("\n") == 1, err
    assert not (tmp_path / "p.dqc.json").exists()


def _store(tmp_path):
    from jaxdrive.agent.store import MemoryEntry, MemoryStore, save

    emb = np.eye(2, 384, dtype=np.float32)
    save(MemoryStore([MemoryEntry("r1", "a stopped car ahead"), MemoryEntry("r2", "a crosswalk")], emb),
         tmp_path / "m")
    return str(tmp_path / "m")


@pytest.mark.parametrize("command", ["eval planning", "memory build", "memory query"])
def test_non_utf8_text_file_is_named(tmp_path, capsys, command):
    """A file that is not UTF-8 text gave "'utf-8' codec can't decode byte ..." without saying which file."""
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'\xff{"id": "x"}\n')
    if command == "eval planning":
        _, gt = _planning_files(tmp_path)
        argv, flag = ["eval", "planning", "--predictions", str(bad), "--gt", gt], "--predictions"
    elif command == "memory build":
        argv, flag = ["memory", "build", "--entries", str(bad), "--out", str(tmp_path / "m2")], "--entries"
    else:
        argv, flag = ["memory", "query", "--store", _store(tmp_path), "--question", "q", "-k", "1",
                      "--stm", str(bad)], "--stm"
    assert main(argv) == 2
    err = _err(capsys)
    assert f"{flag} {bad}: not UTF-8 text" in err, err


def test_memory_build_repeated_id_names_the_line(tmp_path, capsys):
    """A repeated entry id was reported without the file or line (after loading the embedding model)."""
    src = tmp_path / "e.jsonl"
    src.write_text(json.dumps({"id": "r1", "conditions": "a"}) + "\n\n" + json.dumps({"id": "r1", "conditions": "b"})
                   + "\n")
    assert main(["memory", "build", "--entries", str(src), "--out", str(tmp_path / "m")]) == 2
    assert f"{src}:3: field 'id': 'r1' is already the id of line 1" in _err(capsys)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("change,field", [
    ({"question": 5}, "question"),
    ({"question": ["a"]}, "question"),
    ({"steps": [{"action": {"tool": ["x"]}, "ok": True, "update": "u"}]}, "steps[0].action.tool"),
    ({"steps": [{"action": {"tool": 3}, "ok": True, "update": "u"}]}, "steps[0].action.tool"),
])
def test_consolidate_rejects_fields_of_the_wrong_type(tmp_path, capsys, change, field):
    """A verified trajectory whose question or a tool name was not a string crashed half-way through the round
    (AttributeError / TypeError)."""
    from jaxdrive.agent.store import load

    store = _store(tmp_path)
    traj = {"id": "t0", "scene_id": "s", "question": "What now? A) Brake B) Go", "gold": "A", "correct": True,
            "termination": "finish", "reasoning": "The car ahead is stopped, so braking is right.",
            "steps": [{"action": {"tool": "get_ego_states", "arguments": {}}, "ok": True, "update": "u"}], **change}
    (tmp_path / "t.jsonl").write_text(json.dumps(traj) + "\n")
    assert main(["memory", "consolidate", "--store", store, "--trajectories", str(tmp_path / "t.jsonl")]) == 2
    assert f"t.jsonl:1: field {field!r}: expected" in _err(capsys)
    assert load(store).consolidated == []


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not a zip", None])
@pytest.mark.parametrize("flag", ["--predictions", "--gt"])
def test_planning_damaged_npz_is_named(tmp_path, capsys, flag, content):
    """An empty or damaged .npz (a copy cut short) was an EOFError / BadZipFile traceback."""
    pred, gt = _planning_files(tmp_path)
    bad = tmp_path / "bad.npz"
    data = open(pred if flag == "--predictions" else gt, "rb").read()
    bad.write_bytes(data[: len(data) // 2] if content is None else content)
    argv = {"--predictions": pred, "--gt": gt, flag: str(bad)}
    assert main(["eval", "planning", *[x for kv in argv.items() for x in kv]]) == 2
    assert f"{flag} {bad}: cannot read an .npz" in _err(capsys)


def _wrap(text):
    return f"<OUTPUT FORMAT START>{text}<OUTPUT FORMAT END>"


@pytest.mark.parametrize("line,message", [
    ('{"task": "xy", "output": "%s", "gt": [NaN, 2]}' % _wrap("[1, 2]"),
     "gt: expected a list of at least 2 numbers, all finite"),
    ('{"task": "dA", "output": "%s", "xyz1": [Infinity, 2, 3]}' % _wrap("1"),
     "xyz1: expected a list of at least 3 numbers, all finite"),
    ('{"task": "xy", "output": "%s", "gt": [1, 2], "width": "1600"}' % _wrap("[1, 2]"),
     "width: expected a positive number of pixels, got '1600'"),
    ('{"task": "box", "output": "%s", "gt": [0, 0, 5, 5], "height": null}' % _wrap("[0, 0, 5, 5]"),
     "height: expected a positive number of pixels, got None"),
    # an integer beyond float64 (JSON reads 400 digits as an exact int): an OverflowError traceback before
    ('{"task": "xy", "output": "%s", "gt": [1, 2], "width": 1%s}' % (_wrap("[1, 2]"), "0" * 400),
     "width: expected a positive number of pixels, got 1000"),
    ('{"task": "xy", "output": "%s", "gt": [1%s, 2]}' % (_wrap("[1, 2]"), "0" * 400),
     "gt: expected a list of at least 2 numbers, all finite, got [1000"),
])
def test_vqa_drivemllm_malformed_ground_truth_is_an_error(tmp_path, capsys, line, message):
    """A non-finite ground truth scored NaN (the warning blamed the answer) or 0 (Infinity) and a width / height
    that is not a number made every output of the row silently invalid."""
    p = tmp_path / "p.jsonl"
    p.write_text(line + "\n")
    assert main(["eval", "vqa", "drivemllm", "--predictions", str(p)]) == 2
    assert f"{p}:1: {message}" in _err(capsys)


@pytest.mark.parametrize("argv", [["eval", "dqc", "--no-plot"], ["eval", "tps"], ["eval", "vqa", "stsbench"]])
def test_a_directory_as_predictions_is_named_a_directory(tmp_path, capsys, argv):
    """A directory given as --predictions was reported as 'no such file' (it exists: the wrong kind of path)."""
    d = tmp_path / "preds.parquet"
    d.mkdir()
    assert main([*argv, "--predictions", str(d)]) == 2
    err = _err(capsys)
    assert f"--predictions {d}: is a directory; expected a" in err and "no such file" not in err


def test_a_directory_among_several_predictions_is_named(tmp_path, capsys):
    d = tmp_path / "second"
    d.mkdir()
    assert main(["eval", "dqc", "--no-plot", "--predictions", _dqc_file(tmp_path), str(d)]) == 2
    assert f"--predictions {d}: is a directory; expected a parquet file" in _err(capsys)


@pytest.mark.parametrize("benchmark", ["drivelmm", "drivemllm", "stsbench"])
def test_vqa_empty_predictions_file_is_an_error(tmp_path, capsys, benchmark):
    """An empty file printed all-null scores with exit 0 (for drivelmm, a warning about MCQ question numbers)."""
    p = tmp_path / "p.jsonl"
    p.write_text("\n")
    assert main(["eval", "vqa", benchmark, "--predictions", str(p)]) == 2
    assert f"--predictions {p}: no rows" in _err(capsys)


def test_vqa_drivelmm_repeated_idx_is_an_error(tmp_path, capsys):
    """An item given twice (two runs' files concatenated) was scored twice."""
    row = {"idx": "s_1_2", "response": "Final Answer: A) Brake", "gt": "A) Brake"}
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps(row) + "\n" + json.dumps({**row, "idx": "s_1_3"}) + "\n" + json.dumps(row) + "\n")
    assert main(["eval", "vqa", "drivelmm", "--predictions", str(p)]) == 2
    assert f"--predictions {p}:3: field 'idx': 's_1_2' is already the idx of line 1" in _err(capsys)


@pytest.mark.parametrize("content,message", [
    ("\n", "no trajectories (expected one JSON object per line)"),
    ("".join(json.dumps({"id": i, "messages": [], "termination": "finish"}) + "\n"
             for i in ("t0", "t1", "t0")), "t.jsonl:3: field 'id': 't0' is already the id of line 1 (each once)"),
])
@pytest.mark.parametrize("command", ["agent convert", "memory consolidate"])
def test_trajectories_empty_or_repeated_are_refused(tmp_path, capsys, command, content, message):
    """An empty trajectories file exited 0 with 0 records (consolidate committed an unchanged generation); a
    trajectory given twice was converted (or consolidated) twice."""
    from jaxdrive.agent.store import load

    (tmp_path / "t.jsonl").write_text(content)
    if command == "agent convert":
        argv = ["agent", "convert", "--trajectories", str(tmp_path / "t.jsonl"), "--phase", "1",
                "--out", str(tmp_path / "r.jsonl")]
    else:
        store = _store(tmp_path)
        argv = ["memory", "consolidate", "--store", store, "--trajectories", str(tmp_path / "t.jsonl")]
    assert main(argv) == 2
    assert message in _err(capsys)
    assert not (tmp_path / "r.jsonl").exists()
    if command == "memory consolidate":
        assert load(store).consolidated == []


def test_memory_build_out_below_a_file_is_refused_before_embedding(tmp_path, capsys, monkeypatch):
    """``memory build --out FILE/sub`` was a NotADirectoryError traceback after every entry had been embedded."""
    from jaxdrive.agent import embed

    monkeypatch.setattr(embed, "minilm", lambda: pytest.fail("the embedder was loaded"))
    (tmp_path / "e.jsonl").write_text(json.dumps({"id": "r1", "conditions": "a"}) + "\n")
    (tmp_path / "f").write_text("a file")
    out = tmp_path / "f" / "sub"
    assert main(["memory", "build", "--entries", str(tmp_path / "e.jsonl"), "--out", str(out)]) == 2
    assert f"--out {out}: {tmp_path / 'f'} is a file, so no directory can be made below it" in _err(capsys)


@pytest.mark.parametrize("bad", [[[True, False]] * 6, [["1.5", "2"]] * 6, [[1e39, 0.0]] * 6, [[10 ** 400, 0]] * 6])
def test_planning_json_coordinates_must_be_numbers_finite_in_float32(tmp_path, capsys, bad):
    """A JSON prediction of booleans or numeric strings was scored as numbers (numpy converts them); one beyond
    float32 failed the whole run ("pred: non-finite coordinates at sample 0", no token); 10**400 was an
    OverflowError traceback. Each is that token's unusable prediction: reported, the others scored (exit 3)."""
    _, gt = _planning_files(tmp_path)
    pred = tmp_path / "p.json"
    pred.write_text(json.dumps({"a": bad, "b": (np.cumsum(np.ones((6, 2)), axis=0) + 0.5).tolist()}))
    assert main(["eval", "planning", "--predictions", str(pred), "--gt", gt]) == 3
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "prediction a: expected 6 [x, y] points of finite numbers" in err, err
    assert "samples: 1 (1 of the GT's left out" in out, out


def test_agent_run_negative_seed_names_the_flag(tmp_path, capsys):
    """--seed -1 printed numpy's "expected non-negative integer", naming no flag."""
    assert main(["agent", "run", "--scenes", "1", "--seed", "-1", "--out", str(tmp_path / "t.jsonl")]) == 2
    assert "--seed: expected >= 0, got -1" in _err(capsys)


def test_agent_convert_does_not_overwrite_its_trajectories(tmp_path, capsys, monkeypatch):
    """--out naming the --trajectories file (here through another spelling of the path) replaced the trajectories
    with the records converted from them, exit 0."""
    traj = tmp_path / "t.jsonl"
    traj.write_text(json.dumps({"id": "t0", "messages": []}) + "\n")
    before = traj.read_text()
    monkeypatch.chdir(tmp_path)
    assert main(["agent", "convert", "--trajectories", str(traj), "--phase", "1", "--out", "./t.jsonl"]) == 2
    assert "--out t.jsonl: is the --trajectories file" in _err(capsys)
    assert traj.read_text() == before


@pytest.mark.parametrize("command", ["memory build", "memory query", "memory consolidate", "agent convert"])
def test_a_directory_as_an_input_file_is_named_a_directory(tmp_path, capsys, command):
    """A directory given as --entries, --stm or --trajectories was reported as 'no such file' (it exists: the wrong
    kind of path)."""
    d = tmp_path / "d"
    d.mkdir()
    argv, flag = {
        "memory build": (["memory", "build", "--entries", str(d), "--out", str(tmp_path / "m2")], "--entries "),
        "memory query": (["memory", "query", "--store", _store(tmp_path), "--question", "q", "--stm", str(d)],
                         "--stm "),
        "memory consolidate": (["memory", "consolidate", "--store", _store(tmp_path), "--trajectories", str(d)], ""),
        "agent convert": (["agent", "convert", "--trajectories", str(d), "--phase", "1", "--out",
                           str(tmp_path / "r.jsonl")], ""),
    }[command]
    assert main(argv) == 2
    err = _err(capsys)
    assert f"{flag}{d}: is a directory; expected" in err and "no such file" not in err, err


def test_consolidating_the_same_trajectories_again_keeps_the_store(tmp_path, capsys, monkeypatch):
    """Re-running `memory consolidate` on trajectories already consolidated (after an interruption, by mistake)
    committed a new generation equal to the current one, and so deleted the backup generation from before the
    first run."""
    from jaxdrive.agent import embed

    monkeypatch.setattr(embed, "minilm", lambda: lambda texts: np.eye(len(texts), 384, dtype=np.float32))
    store = _store(tmp_path)
    traj = {"id": "t0", "scene_id": "s", "question": "What now? A) Brake B) Go", "gold": "A", "correct": True,
            "termination": "finish", "reasoning": "The car ahead is stopped, so braking is right.",
            "steps": [{"action": {"tool": "get_ego_states", "arguments": {}}, "ok": True, "update": "u"}]}
    (tmp_path / "t.jsonl").write_text(json.dumps(traj) + "\n")
    argv = ["memory", "consolidate", "--store", store, "--trajectories", str(tmp_path / "t.jsonl")]
    assert main(argv) == 0
    generations = sorted(p.name for p in (tmp_path / "m").glob("gen-*"))
    assert generations == ["gen-000001", "gen-000002"]
    capsys.readouterr()
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["skipped_already_consolidated"] == 1 and summary["generation"] == "gen-000002"
    assert sorted(p.name for p in (tmp_path / "m").glob("gen-*")) == generations


@pytest.mark.parametrize("correct,message", [(False, "none of its 1 trajectories is verified"),
                                             (True, "its 1 verified trajectories have no turns in their messages")])
def test_agent_convert_to_no_records_is_refused(tmp_path, capsys, correct, message):
    """Trajectories none of which is verified (a wrong answer), or verified ones without messages, gave an empty
    records file and exit 0, an SFT set with nothing to learn from."""
    traj = {"id": "t0", "scene_id": "s", "question": "What now? A) Brake B) Go", "gold": "A", "correct": correct,
            "termination": "finish", "reasoning": "Braking is right.", "messages": [],
            "steps": [{"action": {"tool": "get_ego_states", "arguments": {}}, "ok": True, "update": "u"}]}
    (tmp_path / "t.jsonl").write_text(json.dumps(traj) + "\n")
    out = tmp_path / "r.jsonl"
    assert main(["agent", "convert", "--trajectories", str(tmp_path / "t.jsonl"), "--phase", "2", "--out",
                 str(out)]) == 2
    err = _err(capsys)
    assert f"--trajectories {tmp_path / 't.jsonl'}: {message}" in err and err.endswith("; no records\n"), err
    assert not out.exists()


@pytest.mark.parametrize("command", ["memory query", "memory consolidate", "agent run"])
def test_a_store_of_another_embedding_width_is_named(tmp_path, capsys, monkeypatch, command):
    """A store built (through the Python API) by an embedder other than all-MiniLM-L6-v2 gave "query/entries:
    expected [Q, D] and [N, D] with the same D", naming no store, after the model loaded (`agent run`: after an
    episode)."""
    from jaxdrive.agent import embed
    from jaxdrive.agent.store import MemoryEntry, MemoryStore, save

    monkeypatch.setattr(embed, "minilm", lambda: pytest.fail("the embedder was loaded"))
    store = tmp_path / "m"
    save(MemoryStore([MemoryEntry("r1", "a stopped car ahead"), MemoryEntry("r2", "a crosswalk")],
                     np.eye(2, 8, dtype=np.float32), embedder="my-8d"), store)
    (tmp_path / "t.jsonl").write_text(json.dumps({"id": "t0", "messages": []}) + "\n")
    argv = {"memory query": ["memory", "query", "--store", str(store), "--question", "q"],
            "memory consolidate": ["memory", "consolidate", "--store", str(store), "--trajectories",
                                   str(tmp_path / "t.jsonl")],
            "agent run": ["agent", "run", "--scenes", "1", "--memory", str(store), "--out", str(tmp_path / "o.jsonl")],
            }[command]
    assert main(argv) == 2
    assert f"memory store {store}: its embeddings are 8-dimensional (embedder 'my-8d')" in _err(capsys)


def test_consolidate_refuses_a_file_of_records(tmp_path, capsys, monkeypatch):
    """`agent convert`'s records (or any JSONL of objects with an id) given as --trajectories were taken as
    trajectories that all failed verification: "verified": 0, exit 0, their ids recorded as consolidated in a newly
    committed generation."""
    from jaxdrive.agent import embed
    from jaxdrive.agent.store import load

    monkeypatch.setattr(embed, "minilm", lambda: lambda texts: np.eye(len(texts), 384, dtype=np.float32))
    store = _store(tmp_path)
    record = {"id": "syn_default_0_leading#p1s0", "phase": 1, "segments": []}
    (tmp_path / "records.jsonl").write_text(json.dumps(record) + "\n")
    assert main(["memory", "consolidate", "--store", store, "--trajectories", str(tmp_path / "records.jsonl")]) == 2
    assert "records.jsonl:1: missing field 'termination'" in _err(capsys)
    assert load(store).consolidated == [] and sorted(p.name for p in (tmp_path / "m").glob("gen-*")) == ["gen-000001"]
