"""What the judge learns from and how it is used at scale, on a tiny random judge directory: the tiny judge's learnt
tokenizer (yes/no single tokens, text round-trips), SFT "slots" targets (the seven gate tokens the policy reads, in
the all-yes context), the text description naming the broken rules, the VLM direct-score baseline (dataset, scores,
``jaxdrive judge baselines --direct-model``), and ``jaxdrive score --gates judge:DIR`` (per-proposal gates from the
judge, identical to scoring with the gate table it writes)."""
import json

import ml_collections
import numpy as np
import pyarrow.parquet as pq
import pytest

from jaxdrive.cli import main
from jaxdrive.judge import prompt as P
from jaxdrive.judge import recipes
from jaxdrive.judge.dataset import read_records
from jaxdrive.judge.gates import RULE_LABELS, expand_gates
from jaxdrive.judge.policy import answer_slots
from jaxdrive.judge.tiny import save_tiny_judge
from jaxdrive.models.chat import ChatEncoder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("judge_scale")
    data = root / "data"
    assert main(["judge", "data", "--out", str(data), "--train", "3", "--test", "2", "--image-size", "32",
                 "--batch-size", "5", "--no-progress"]) == 0
    return root, data, save_tiny_judge(root / "tiny_judge")


def test_judge_tokenizer_is_short_and_round_trips(env):
    _, _, model = env
    tok = ChatEncoder.from_pretrained(model).tokenizer
    slots = answer_slots(ChatEncoder.from_pretrained(model))
    assert tok.decode([slots.yes_id]).strip() == "yes" and tok.decode([slots.no_id]).strip() == "no"
    assert len(tok(P.SYSTEM_TEXT)["input_ids"]) < len(P.SYSTEM_TEXT.encode()) / 3
    text = "Ünïcode 12.5 m/s, a zebra 🦓 nobody trained on"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_slot_targets_and_broken_rules(env):
    _, data, model = env
    cfg = ml_collections.ConfigDict(dict(path=str(data), split="train", model_path=str(model), describe=True,
                                         target="slots"))
    exs = recipes.gate_examples(cfg)
    encoder = ChatEncoder.from_pretrained(model)
    slots = answer_slots(encoder)
    tok = encoder.tokenizer
    records = {r.id: r for r in read_records(data)}
    for e in exs:
        assert P.parse_answer(tok.decode(e["answer"].tolist(), skip_special_tokens=True))[0].all()  # all-yes input
        offsets = np.asarray(slots.offsets)
        assert e["answer_mask"].sum() == 7 and (np.flatnonzero(e["answer_mask"]) == offsets).all()
        np.testing.assert_array_equal(e["targets"][offsets] == slots.yes_id, e["gates"])
        keep = np.ones(len(e["answer"]), bool)
        keep[offsets] = False
        np.testing.assert_array_equal(e["targets"][keep], e["answer"][keep])
        r = records[e["id"]]
        prompt = tok.decode(e["prompt"].tolist())
        checks = prompt.split("Rule checks: ")[1].split(".")[0].split(", ")
        assert [c.split(" ")[0] for c in checks] == list(RULE_LABELS)  # answer order: fixed distance to each slot
        broken = [c.split(" ")[0] for c in checks if c.endswith(" broken")]
        if r.label == 1:  # Eq. 10-11: a reasonable trajectory's gates are off exactly where it breaks a rule
            assert broken == [g for g in RULE_LABELS if not r.gates[g]]
    with pytest.raises(ValueError, match="data.target"):
        recipes.gate_examples(ml_collections.ConfigDict(dict(cfg.to_dict(), target="everything")))


def test_direct_score_baseline(env, tmp_path):
    root, data, model = env
    cfg = ml_collections.ConfigDict(dict(path=str(data), split="train", model_path=str(model)))
    exs = recipes.direct_examples(cfg)
    tok = ChatEncoder.from_pretrained(model).tokenizer
    for e in exs:
        (i,) = np.flatnonzero(e["answer_mask"])
        assert tok.decode([e["targets"][i]]).strip() == ("yes" if e["label"] else "no")
        assert "reasonable" in tok.decode(e["prompt"].tolist())
    assert main(["judge", "baselines", "--data", str(data), "--out", str(tmp_path), "--direct-model", str(model)]) == 0
    dqc = pq.read_table(tmp_path / "test_dqc_direct.parquet").to_pydict()
    assert len(dqc["score"]) == len(read_records(data, "test"))
    assert all(0.0 < s < 1.0 for s in dqc["score"]) and len(set(np.round(dqc["score"], 6))) > 1
    assert main(["judge", "baselines", "--data", str(data), "--direct-model", str(tmp_path / "nothing")]) == 2


def test_score_gates_from_judge(env, tmp_path):
    _, _, model = env
    common = ["score", "--count", "2", "--num-proposals", "4", "--batch-size", "2", "--no-progress"]
    assert main(common + ["--gates", f"judge:{model}", "--out", str(tmp_path / "judged")]) == 0
    table = json.loads((tmp_path / "judged" / "judge_gates.json").read_text())
    assert len(table) == 2 and all(np.shape(rows) == (4, 9) for rows in table.values())
    for rows in table.values():  # 7 rule gates expanded: TLC always on, HC == EC (COMFORT)
        g = np.asarray(rows)
        assert g[:, 3].all() and (g[:, 7] == g[:, 8]).all()
        assert (np.asarray(expand_gates(g[:, [6, 0, 1, 2, 5, 7, 4]])) == g).all()
    assert main(common + ["--gates", str(tmp_path / "judged" / "judge_gates.json"), "--out", str(tmp_path / "f")]) == 0
    assert main(common + ["--out", str(tmp_path / "plain")]) == 0
    read = lambda d: pq.read_table(sorted((tmp_path / d).rglob("*.parquet"))[0]).to_pandas()  # noqa: E731
    judged, from_file, plain = read("judged"), read("f"), read("plain")
    np.testing.assert_array_equal(judged["epdms"].to_numpy(), from_file["epdms"].to_numpy())
    all_on = np.concatenate([np.asarray(table[s]).all(-1) for s in judged["scene_id"].unique()])
    np.testing.assert_allclose(judged["epdms"].to_numpy()[all_on], plain["epdms"].to_numpy()[all_on], atol=1e-6)
    assert main(common + ["--gates", "judge:/nonexistent", "--out", str(tmp_path / "bad")]) == 2
