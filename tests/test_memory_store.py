"""Long-term memory store and offline consolidation: atomic pickle-free store (survives SIGKILL mid-write), Eq. 6
utility updates exact, consolidation idempotent, deduplication against the store, pluggable abstraction, CLI."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from agent_scenes import CROSSWALK, known_scene

from jaxdrive.agent import stm
from jaxdrive.agent.consolidate import ConsolidationConfig, LLMAbstractor, consolidate, extract, verify
from jaxdrive.agent.embed import minilm
from jaxdrive.agent.store import MemoryEntry, MemoryStore, build, format_entries, load, read_entries_jsonl, save
from jaxdrive.agent.tools import ToolContext

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def embed():
    return minilm()


RULES = [
    MemoryEntry("r1", "approaching a pedestrian crossing in an urban street", "pedestrians may step out",
                "slow down and yield before the crossing", "get_nearest_pedestrian_crossing", 1.0, "sceneA", "rule"),
    MemoryEntry("r2", "a stopped vehicle ahead in the ego lane", "rear-end collision",
                "keep a safe gap, brake smoothly", "get_leading_object_detection -> get_ego_states", 3.0, "sceneB",
                "rule", answer="B"),
    MemoryEntry("r3", "changing lanes on a multi-lane road", "vehicles in the blind spot",
                "check the adjacent lane before moving", "get_surrounding_object_detections", 0.5, "sceneC", "rule"),
]


def traj(i, *, correct=True, used=("r2",), retrieved=("r1", "r2"), question="What should the ego do about the car "
         "ahead? A) Accelerate B) Brake C) Turn left", reasoning="The leading vehicle is stopped 8 m ahead in the ego "
         "lane, so braking keeps a safe gap.", tools=("get_leading_object_detection",), scene="sceneZ"):
    return {"id": f"t{i}", "scene_id": scene, "question": question, "gold": "B", "correct": correct,
            "termination": "finish", "retrieved": list(retrieved), "memory_used": list(used), "reasoning": reasoning,
            "stm": "ego: speed 8.0 m/s\nrisk: high (vehicle 3 stopped ahead)",
            "steps": [{"action": {"tool": t, "arguments": {}}, "ok": True, "update": "leading vehicle stopped"}
                      for t in tools]}


def test_store_roundtrip_pickle_free_and_safe_view(tmp_path, embed):
    store = build(RULES, embed)
    assert store.embeddings.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(store.embeddings, axis=1), 1.0, atol=1e-5)
    gen = save(store, tmp_path / "m")
    assert sorted(p.name for p in gen.iterdir()) == ["embeddings.npy", "entries.parquet", "meta.json"]
    np.load(gen / "embeddings.npy", allow_pickle=False)
    back = load(tmp_path / "m")
    assert back.entries == store.entries
    np.testing.assert_array_equal(back.embeddings, store.embeddings)
    view = RULES[1].safe_view()
    assert set(view) == {"conditions", "risks", "success_pattern", "tool_strategy"}
    assert "B" not in format_entries([RULES[1]]).split("tool strategy")[0].split("[1]")[0]
    assert "sceneB" not in format_entries(RULES) and "r2" not in format_entries(RULES)
    np.testing.assert_array_equal(store.exclusion(["sceneB", "other"]), [[False, True, False], [False] * 3])
    with pytest.raises(ValueError, match="no committed generation"):
        load(tmp_path / "missing")


def test_eq6_utility_update_exact_and_idempotent(tmp_path, embed):
    store = build(RULES, embed)
    eta = 0.37
    buf = [traj(0), traj(1, used=("r2", "r1")), traj(2, correct=False, used=("r1",)),  # unverified: no credit
           traj(3, used=("r3",)),  # r3 not retrieved: no credit
           traj(4, used=("r2", "r2"))]  # one credit per trajectory
    assert [verify(t) for t in buf] == [True, True, False, True, True]
    out, rep = consolidate(store, buf, embed, cfg=ConsolidationConfig(eta=eta))
    w = {e.id: e.utility for e in RULES}
    for t in (buf[0], buf[1], buf[4]):  # Eq. 6, applied per verified trajectory
        for i in dict.fromkeys(t["memory_used"]):
            w[i] = w[i] + eta
    assert {e.id: e.utility for e in out.entries[:3]} == w  # exact float equality
    assert rep.reinforced == {"r2": 3, "r1": 1}
    assert [e.utility for e in store.entries] == [1.0, 3.0, 0.5]  # input store untouched
    # the four verified trajectories tell the same experience: one cluster, duplicates dropped, one new entry
    assert len(out.entries) == 4 and rep.added == [out.entries[3].id]
    new = out.entries[3]
    assert new.tool_strategy == "get_leading_object_detection" and new.answer == "B" and new.scene_id == "sceneZ"
    assert "B" not in json.dumps(new.safe_view()).replace("Brake", "")
    save(out, tmp_path / "m")
    again, rep2 = consolidate(load(tmp_path / "m"), buf, embed, cfg=ConsolidationConfig(eta=eta))
    assert rep2.skipped_already_consolidated == len(buf) and not rep2.added and not rep2.reinforced
    assert again.entries == out.entries and again.consolidated == out.consolidated
    np.testing.assert_array_equal(again.embeddings, out.embeddings)
    # the same experience under new trajectory ids: known to the store, so nothing is added (utilities still move)
    more, rep3 = consolidate(out, [traj(10), traj(11)], embed, cfg=ConsolidationConfig(eta=eta))
    assert len(more.entries) == 4 and (rep3.duplicates_dropped, rep3.known_dropped) == (1, 1)
    assert rep3.reinforced == {"r2": 2}


def test_extracted_risks_are_the_risky_objects_without_ids():
    """Ext(C)'s risk factors from a real serialised STM: every object line carries "risk=", so all of them (the
    low-risk ones first, with their scene-specific ids and distances) became the entry's risks; now the high- and
    medium-risk objects, abstracted (type, sector, band, motion, relations)."""
    ctx = ToolContext.from_scene(known_scene(), {"crosswalks": [CROSSWALK]})
    text = stm.build(ctx).serialise()
    e = extract(dict(traj(0), stm=text))
    assert e.risks == ("medium-risk vehicle front-left near same-dir (ahead_of_ego, left_of_ego, receding); "
                       "medium-risk vehicle front near same-dir (ahead_of_ego, in_ego_lane, following_path)")
    assert "risk=low" not in e.risks and "lead" not in e.risks
    assert extract(dict(traj(0), stm=text.replace("risk=medium", "risk=low"))).risks == ""  # "risk: none high"
    assert extract(traj(0)).risks == "high (vehicle 3 stopped ahead)"  # free-form STM: its risk line


def test_cluster_conflicts_quality_and_llm_abstraction(embed):
    store = build(RULES[:1], embed)
    q2 = "Is it safe to change into the left lane now? A) Yes B) No"
    r2 = "A vehicle occupies the left lane beside the ego, so the lane change is unsafe and the ego should wait."
    buf = [traj(0, question=q2, reasoning=r2, tools=("get_surrounding_object_detections",)),
           traj(1, question=q2, reasoning=r2 + " ", tools=("get_surrounding_object_detections",)),
           traj(2, question=q2, reasoning=r2, tools=("get_front_object_detections",)),  # conflicting strategy
           traj(3, reasoning="short", tools=("get_ego_states",)),  # fails the quality filter
           traj(4, question="How far is the nearest crossing?", reasoning="The crossing is 12 m ahead of the ego "
                "according to the map query.", tools=("get_nearest_pedestrian_crossing",))]
    replies = iter(['{"conditions": "lane change with an occupied adjacent lane", "risks": "side collision", '
                    '"success_pattern": "detect neighbours before deciding", "tool_strategy": '
                    '"get_surrounding_object_detections"}', "not json at all"])
    llm = LLMAbstractor(lambda prompt: next(replies))
    out, rep = consolidate(store, buf, embed, abstract=llm)
    assert rep.verified == 5 and rep.quality_kept == 4
    assert rep.conflicts_dropped == 1 and rep.duplicates_dropped == 1
    assert len(rep.added) == 2 and llm.fallbacks == 1
    added = {e.conditions: e for e in out.entries[1:]}
    assert "lane change with an occupied adjacent lane" in added
    assert added["lane change with an occupied adjacent lane"].tool_strategy == "get_surrounding_object_detections"
    # embeddings match the stored text
    np.testing.assert_allclose(out.embeddings[1:], embed([e.text() for e in out.entries[1:]]), atol=1e-5)


def test_an_entry_abstracted_across_scenes_is_excluded_for_each(tmp_path, embed):
    """Found by an exploratory pass: an entry abstracted from a cluster spanning scenes A and B kept only A's
    scene_id, so a query from scene B retrieved an entry built from its own trajectory (the paper's same-scene
    safeguard, A.2, leaked). Old stores without the scenes column still load."""
    import pyarrow.parquet as pq

    q = "Is it safe to change into the left lane now? A) Yes B) No"
    r = "A vehicle occupies the left lane beside the ego, so the lane change is unsafe and the ego should wait."
    tools = ("get_surrounding_object_detections",)
    buf = [traj(0, question=q, reasoning=r, tools=tools, scene="sA"),
           traj(1, question=q, reasoning=r + " ", tools=tools, scene="sB"),  # a duplicate: dropped from the text
           traj(2, question=q, reasoning=r + "  ", tools=tools, scene="sC")]
    out, rep = consolidate(build(RULES[:1], embed), buf, embed)
    assert len(rep.added) == 1 and rep.duplicates_dropped == 2
    entry = out.entries[1]
    assert entry.scene_id == "sA" and entry.scenes == ["sB", "sC"]
    np.testing.assert_array_equal(out.exclusion(["sA", "sB", "sC", "sZ", "sceneA"]),
                                  [[False, True], [False, True], [False, True], [False, False], [True, False]])
    gen = save(out, tmp_path / "m")
    assert load(tmp_path / "m").entries == out.entries
    table = pq.read_table(gen / "entries.parquet")
    pq.write_table(table.drop(["scenes"]), gen / "entries.parquet")  # a store written before the column existed
    assert [e.scenes for e in load(tmp_path / "m").entries] == [[], []]


_WRITER = """
import sys, numpy as np
from jaxdrive.agent.store import MemoryEntry, MemoryStore, save, load
root = sys.argv[1]
rng = np.random.default_rng(0)
store = load(root)
while True:
    n = len(store.entries)
    e = MemoryEntry(f"e{n}", f"condition {n} " + "x" * 2000, "risk", "pattern", "tool", float(n))
    emb = rng.standard_normal((1, store.embeddings.shape[1])).astype(np.float32)
    store = MemoryStore(store.entries + [e], np.concatenate([store.embeddings, emb / np.linalg.norm(emb)]))
    save(store, root)
    print(len(store.entries), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("line,msg", [
    ('[1, 2]', "expected a JSON object"), ('{"id": "a", "conditions": "c", "utility": "high"}', "'utility'"),
    ('{"id": "a", "conditions": "c", "utility": null}', "'utility'"),
    ('{"id": "a", "conditions": "c", "utility": NaN}', "'utility': expected a finite"),
    ('{"id": "a", "conditions": "c", "sources": "t1"}', "'sources'"),
    ('{"id": "a", "conditions": "c", "risks": 5}', "'risks': expected a string"),
    ('{"id": "a", "conditions": "c", "support": 1.7}', "'support'"),
    ('{"id": "a", "conditions": "c", "kind": "banana"}', "'kind'")])
def test_entry_fields_checked(tmp_path, line, msg):
    """Entry files: a wrong type was taken silently (a string of sources split into characters, support 1.7 -> 1, a
    NaN utility that disables the utility term at retrieval, an int risks that failed at save) or raised a bare
    TypeError; each is a ValueError naming the line and the field."""
    (tmp_path / "e.jsonl").write_text('{"id": "ok", "conditions": "fine"}\n' + line + "\n")
    with pytest.raises(ValueError, match=f"e.jsonl:2: .*{msg}"):
        read_entries_jsonl(tmp_path / "e.jsonl")


def test_entry_utility_beyond_float64_is_named(tmp_path):
    """A utility of 400 digits (JSON reads it as an exact int) raised OverflowError from math.isfinite."""
    (tmp_path / "e.jsonl").write_text('{"id": "a", "conditions": "c", "utility": 1%s}\n' % ("0" * 400))
    with pytest.raises(ValueError, match="e.jsonl:1: .*'utility': expected a finite number, got 1000"):
        read_entries_jsonl(tmp_path / "e.jsonl")


def test_damaged_store_named(tmp_path):
    """A damaged CURRENT or meta.json: save raised IndexError and load KeyError; both name the store now."""
    store = MemoryStore([MemoryEntry("a", "cond a"), MemoryEntry("b", "cond b")], np.eye(2, 4))
    gen = save(store, tmp_path / "m")
    meta = json.loads((gen / "meta.json").read_text())
    (gen / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "count"}))
    with pytest.raises(ValueError, match="meta.json: expected an object with an integer 'count'"):
        load(tmp_path / "m")
    gen = save(store, tmp_path / "m")
    np.save(gen / "embeddings.npy", np.eye(3, 4, dtype=np.float32))
    with pytest.raises(ValueError, match=f"memory store .*{gen.name}: embeddings: expected \\[2, D\\]"):
        load(tmp_path / "m")
    (tmp_path / "m" / "CURRENT").write_text("garbage\n")
    for fn in (lambda: load(tmp_path / "m"), lambda: save(store, tmp_path / "m")):
        with pytest.raises(ValueError, match="CURRENT names 'garbage', not a generation"):
            fn()


def test_no_entry_lost_when_killed_mid_write(tmp_path):
    root = tmp_path / "m"
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((2000, 384)).astype(np.float32)
    base = [MemoryEntry(f"b{i}", f"base {i}", utility=float(i)) for i in range(2000)]
    save(MemoryStore(base, emb / np.linalg.norm(emb, axis=1, keepdims=True)), root)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    committed = 2000
    for trial in range(4):
        p = subprocess.Popen([sys.executable, "-c", _WRITER, str(root)], stdout=subprocess.PIPE, env=env, text=True)
        first = p.stdout.readline()  # at least one save done; kill during a later one
        assert first.strip(), "writer did not start"
        time.sleep(0.05 + 0.07 * trial)
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        printed = [int(x) for x in (first + out).split()]
        store = load(root)
        n = len(store.entries)
        assert n >= max(printed) >= committed  # everything reported committed is there
        assert [e.id for e in store.entries[:2000]] == [f"b{i}" for i in range(2000)]
        assert [e.id for e in store.entries[2000:]] == [f"e{i}" for i in range(2000, n)]
        assert store.embeddings.shape == (n, 384)
        committed = n
    # a writer killed after writing its generation but before the CURRENT swap: old store committed, next save fine
    kill_before_commit = _WRITER.replace("save(store, root)", "import os; os.replace = lambda *a: os._exit(9); "
                                         "save(store, root)")
    r = subprocess.run([sys.executable, "-c", kill_before_commit, str(root)], env=env, capture_output=True, text=True)
    assert r.returncode == 9
    assert len(load(root).entries) == committed
    save(load(root), root)
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]
    assert len([p for p in root.iterdir() if p.name.startswith("gen-")]) == 2


@pytest.mark.slow
def test_memory_cli(tmp_path, capsys):
    from jaxdrive.cli import main

    src = tmp_path / "entries.jsonl"
    src.write_text("\n".join(json.dumps(dataclasses.asdict(e)) for e in RULES) + "\n")
    assert main(["memory", "build", "--entries", str(src), "--out", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    assert main(["memory", "query", "--store", str(tmp_path / "m"), "--question", "There is a stopped car in my lane",
                 "-k", "2", "--scene-id", "sceneA"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and rows[0]["conditions"] == RULES[1].conditions
    assert all(r["conditions"] != RULES[0].conditions for r in rows)  # sceneA excluded
    assert all(set(r) == {"score", "conditions", "risks", "success_pattern", "tool_strategy"} for r in rows)
    # without -k: the top 4 (TOP_K), or every entry of this 3-entry store (it was "-k: expected 1..3, got 4")
    assert main(["memory", "query", "--store", str(tmp_path / "m"), "--question", "a stopped car"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(RULES) == 3
    tj = tmp_path / "t.jsonl"
    tj.write_text(json.dumps(traj(0)) + "\n")
    assert main(["memory", "consolidate", "--store", str(tmp_path / "m"), "--trajectories", str(tj),
                 "--eta", "0.5"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["verified"] == 1 and summary["entries"] == 4
    assert load(tmp_path / "m").entries[1].utility == 3.5
    # building again over the store replaces what consolidation added: said, with where the old generation is
    assert main(["memory", "build", "--entries", str(src), "--out", str(tmp_path / "m")]) == 0
    assert "replaced the store in" in capsys.readouterr().err and load(tmp_path / "m").entries[1].utility != 3.5
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    assert main(["memory", "build", "--entries", str(bad), "--out", str(tmp_path / "m2")]) == 2
    assert "conditions" in capsys.readouterr().err


def test_memory_and_agent_cli_bad_inputs(tmp_path, capsys):
    """Bad input to `jaxdrive memory` / `jaxdrive agent convert` is a usage error (exit 2) naming what is wrong: these
    were tracebacks (a missing trajectories file, a non-object line, a trajectory without id, a missing --stm file,
    a non-list ``steps``), a string ``memory_used`` was read letter by letter,
    or taken silently (--eta nan poisoned every credited utility, --lam nan printed nothing with exit 0, --devices 0
    meant unsharded, an empty entries file built an empty store)."""
    from jaxdrive.cli import main

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((2, 384))
    save(MemoryStore(RULES[:2], emb / np.linalg.norm(emb, axis=1, keepdims=True)), tmp_path / "m")
    files = {"obj.jsonl": "[1]\n", "noid.jsonl": '{"correct": true}\n', "nomsg.jsonl": '{"id": "t0"}\n',
             "empty.jsonl": "\n", "steps.jsonl": '{"id": "t0", "correct": true, "steps": "call"}\n',
             "used.jsonl": '{"id": "t0", "retrieved": ["m1"], "memory_used": "m1"}\n'}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    m, t = str(tmp_path / "m"), lambda name: str(tmp_path / name)
    cases = [
        (["memory", "consolidate", "--store", m, "--trajectories", t("nope.jsonl")], "no such file"),
        (["memory", "consolidate", "--store", m, "--trajectories", t("obj.jsonl")], "obj.jsonl:1: expected a JSON"),
        (["memory", "consolidate", "--store", m, "--trajectories", t("noid.jsonl")], "missing field 'id'"),
        (["memory", "consolidate", "--store", m, "--trajectories", t("nomsg.jsonl"), "--eta", "nan"], "eta: expected"),
        (["memory", "consolidate", "--store", m, "--trajectories", t("steps.jsonl")],
         "steps.jsonl:1: field 'steps': expected a list of step objects, got str"),
        (["memory", "consolidate", "--store", m, "--trajectories", t("used.jsonl")],
         "used.jsonl:1: field 'memory_used': expected a list of entry ids"),
        (["memory", "query", "--store", m, "--question", "q", "-k", "1", "--stm", t("nope.txt")], "--stm"),
        (["memory", "query", "--store", m, "--question", "q", "-k", "1", "--devices", "0"], "--devices"),
        (["memory", "query", "--store", m, "--question", "q", "-k", "1", "--lam", "nan"], "lam: expected a finite"),
        (["memory", "build", "--entries", t("empty.jsonl"), "--out", t("m2")], "no entries"),
        (["memory", "build", "--entries", t("nomsg.jsonl"), "--out", t("obj.jsonl")], "is a file; expected an output directory"),
        (["agent", "convert", "--trajectories", t("obj.jsonl"), "--phase", "1", "--out", t("r")], "JSON object"),
        (["agent", "convert", "--trajectories", t("nomsg.jsonl"), "--phase", "2", "--out", t("r")],
         "nomsg.jsonl:1: missing field 'messages'")]
    for argv, msg in cases:
        assert main(argv) == 2, argv
        assert msg in capsys.readouterr().err, argv
    assert not (tmp_path / "m2").exists() and load(m).consolidated == []


@pytest.mark.slow
def test_agent_run_with_memory_then_consolidate(tmp_path, capsys):
    """End to end: retrieval feeds the loop, the scripted policy cites entry [1], consolidation credits it (Eq. 6) and
    adds the verified experiences; a second consolidation of the same trajectories is a no-op."""
    from jaxdrive.cli import main

    src = tmp_path / "entries.jsonl"
    src.write_text("\n".join(json.dumps(dataclasses.asdict(e)) for e in RULES) + "\n")
    store = tmp_path / "m"
    assert main(["memory", "build", "--entries", str(src), "--out", str(store)]) == 0
    tj = tmp_path / "t.jsonl"
    assert main(["agent", "run", "--scenes", "1", "--seed", "5", "--memory", str(store), "--out", str(tj)]) == 0
    trajs = [json.loads(x) for x in tj.read_text().splitlines()]
    assert all(len(t["retrieved"]) == 3 and t["memory_used"] == t["retrieved"][:1] for t in trajs)
    assert all(t["memory"].startswith("[1] conditions:") and "sceneA" not in t["memory"] for t in trajs)
    capsys.readouterr()
    assert main(["memory", "consolidate", "--store", str(store), "--trajectories", str(tj), "--eta", "0.25"]) == 0
    after = load(store)
    credits = {}
    for t in trajs:
        credits[t["memory_used"][0]] = credits.get(t["memory_used"][0], 0) + 1
    before = {e.id: e.utility for e in RULES}
    for e in after.entries[:3]:
        want = before[e.id]
        for _ in range(credits.get(e.id, 0)):
            want = want + 0.25
        assert e.utility == want
    assert len(after.entries) > 3 and all(e.kind == "experience" for e in after.entries[3:])
    assert main(["memory", "consolidate", "--store", str(store), "--trajectories", str(tj)]) == 0
    again = load(store)
    assert again.entries == after.entries


def test_memory_query_checks_its_flags_before_loading_the_embedder(tmp_path, capsys, monkeypatch):
    """``memory query``: ``--lam nan`` said "lam: ..." after the embedder loaded, ``--lam -5`` was taken (a negative
    utility weight ranks the least useful entries first), ``--devices`` beyond the devices said "devices: ..." after
    loading, and an empty ``--question`` retrieved for nothing."""
    from jaxdrive.cli import main

    emb = np.eye(2, 384, dtype=np.float32)
    save(MemoryStore(RULES[:2], emb), tmp_path / "m")

    def loaded(*args, **kwargs):
        raise AssertionError("the embedder was loaded before the flags were checked")
    monkeypatch.setattr("jaxdrive.agent.embed.minilm", loaded)
    m = str(tmp_path / "m")
    cases = [(["--lam", "nan"], "--lam: expected a finite utility weight >= 0, got nan"),
             (["--lam", "inf"], "--lam: expected a finite utility weight >= 0, got inf"),
             (["--lam", "-5"], "--lam: expected a finite utility weight >= 0, got -5.0"),
             (["--devices", "100000"], "--devices: expected 1.."),
             (["--devices", "0"], "--devices: expected 1.."),
             (["--question", ""], "--question: expected a non-empty question"),
             (["--question", "  \n"], "--question: expected a non-empty question")]
    for extra, says in cases:
        assert main(["memory", "query", "--store", m, "--question", "q", "-k", "1", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert says in err, (extra, err)
