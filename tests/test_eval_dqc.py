"""DQC / TPS metrics equal scikit-learn (ties included); single-class cases as spec/eval-protocols.md §E; the
``jaxdrive eval dqc|tps`` commands write the contract's JSON keys."""
import json
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score, balanced_accuracy_score, roc_auc_score

from jaxdrive.cli import main
from jaxdrive.eval import dqc


@pytest.mark.parametrize("seed", range(6))
def test_equal_to_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 300))
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    s = np.round(rng.uniform(0, 1, n), int(rng.integers(1, 3)))  # heavy ties
    m = dqc.dqc_metrics(s, y)
    assert m["auc"] == pytest.approx(100 * roc_auc_score(y, s), abs=1e-9)
    assert m["ap_pos"] == pytest.approx(100 * average_precision_score(y, s), abs=1e-9)
    assert m["ap_neg"] == pytest.approx(100 * average_precision_score(1 - y, -s), abs=1e-9)
    for tau in (0.7, 0.8, 0.9):
        pred = (s > tau).astype(int)
        assert m[f"acc_{tau}"] == pytest.approx(100 * np.mean(pred == y))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert m[f"bacc_{tau}"] == pytest.approx(100 * balanced_accuracy_score(y, pred))


def test_spec_vectors():
    cases = [([0, 0, 1, 1], [.1, .4, .35, .8], 0.75, 0.833333, 0.833333),
             ([0, 1, 0, 1], [.5, .5, .5, .5], 0.5, 0.5, 0.5),
             ([0, 1, 1, 0, 1], [.2, .6, .6, .6, .9], 0.833333, 0.833333, 0.75)]
    for y, s, auc, ap, apn in cases:
        m = dqc.dqc_metrics(np.array(s), np.array(y))
        assert m["auc"] / 100 == pytest.approx(auc, abs=1e-6)
        assert m["ap_pos"] / 100 == pytest.approx(ap, abs=1e-6)
        assert m["ap_neg"] / 100 == pytest.approx(apn, abs=1e-6)


@pytest.mark.parametrize("label", [0, 1])
def test_single_class(label):
    y = np.full(6, label)
    s = np.array([0.1, 0.5, 0.5, 0.75, 0.85, 0.95])
    m = dqc.dqc_metrics(s, y)
    assert np.isnan(m["auc"])  # sklearn 1.9.1: nan + UndefinedMetricWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isnan(roc_auc_score(y, s))
        assert m["ap_pos"] == pytest.approx(100 * average_precision_score(y, s))
        assert m["ap_neg"] == pytest.approx(100 * average_precision_score(1 - y, -s))
        for tau in (0.7, 0.8, 0.9):
            assert m[f"bacc_{tau}"] == pytest.approx(100 * balanced_accuracy_score(y, (s > tau).astype(int)))
    assert (m["ap_pos"], m["ap_neg"]) == pytest.approx((100.0, 0.0) if label else (0.0, 100.0))


def test_tps_accuracy_ties_wrong():
    a = np.array([0.9, 0.2, 0.5, 0.5, 0.1])
    b = np.array([0.1, 0.8, 0.5, 0.4, 0.3])
    pref = np.array(["a", "b", "a", "b", "a"])
    assert dqc.tps_accuracy(a, b, pref) == pytest.approx(40.0)  # rows 0, 1 right; the tie (row 2) wrong
    rng = np.random.default_rng(0)
    a, b = np.round(rng.uniform(size=200), 1), np.round(rng.uniform(size=200), 1)
    pref = np.where(rng.uniform(size=200) < 0.5, "a", "b")
    expect = np.mean([(x > z) if p == "a" else (z > x) for x, z, p in zip(a, b, pref)])
    assert dqc.tps_accuracy(a, b, pref) == pytest.approx(100 * expect)
    with pytest.raises(ValueError, match="preferred"):
        dqc.tps_accuracy(a, b, np.full(200, "c"))


def test_validation():
    with pytest.raises(ValueError, match="label"):
        dqc.dqc_metrics([0.1, 0.2], [0, 2])
    with pytest.raises(ValueError, match="score"):
        dqc.dqc_metrics([0.1, np.nan], [0, 1])


def test_cli_dqc_and_tps(tmp_path, capsys):
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 50)
    s = np.clip(0.3 * y + rng.uniform(0, 0.7, 50), 0, 1).round(2)
    p = tmp_path / "P.parquet"
    pd.DataFrame({"score": s, "label": y}).to_parquet(p)
    q = tmp_path / "Q.parquet"
    pd.DataFrame({"score": np.full(50, 0.5), "label": y}).to_parquet(q)
    assert main(["eval", "dqc", "--predictions", str(p), str(q), "--names", "judge", "const"]) == 0
    out = capsys.readouterr().out
    assert "| judge" in out and "AP-" in out and "| const" in out
    got = json.loads((tmp_path / "P.dqc.json").read_text())
    assert set(got) == {"acc_0.7", "acc_0.8", "acc_0.9", "bacc_0.7", "bacc_0.8", "bacc_0.9", "auc", "ap_pos", "ap_neg"}
    assert got["auc"] == pytest.approx(100 * roc_auc_score(y, s), abs=1e-4)
    assert json.loads((tmp_path / "Q.dqc.json").read_text())["auc"] == pytest.approx(50.0)
    assert (tmp_path / "P.dqc.png").stat().st_size > 1000
    # single class: AUC undefined -> null in JSON, n/a in the table
    one = tmp_path / "one.parquet"
    pd.DataFrame({"score": s, "label": np.ones(50, int)}).to_parquet(one)
    assert main(["eval", "dqc", "--predictions", str(one), "--no-plot"]) == 0
    assert json.loads((tmp_path / "one.dqc.json").read_text())["auc"] is None
    t = tmp_path / "T.parquet"
    pd.DataFrame({"score_a": [0.9, 0.5, 0.2], "score_b": [0.1, 0.5, 0.3], "preferred": ["a", "a", "b"]}).to_parquet(t)
    assert main(["eval", "tps", "--predictions", str(t)]) == 0
    assert json.loads((tmp_path / "T.tps.json").read_text()) == {"accuracy": pytest.approx(200 / 3, abs=1e-4)}


def test_cli_bad_input(tmp_path, capsys):
    assert main(["eval", "dqc", "--predictions", str(tmp_path / "missing.parquet")]) == 2
    assert "--predictions" in capsys.readouterr().err
    p = tmp_path / "P.parquet"
    pd.DataFrame({"score": [0.5], "lbl": [1]}).to_parquet(p)
    assert main(["eval", "dqc", "--predictions", str(p)]) == 2
    assert "label" in capsys.readouterr().err
    pd.DataFrame({"score": [1.5], "label": [1]}).to_parquet(p)
    assert main(["eval", "dqc", "--predictions", str(p)]) == 2
    (tmp_path / "bad.parquet").write_text("not parquet")
    assert main(["eval", "tps", "--predictions", str(tmp_path / "bad.parquet")]) == 2
    capsys.readouterr()
    pd.DataFrame({"score": ["high", "low"], "label": [1, 0]}).to_parquet(p)  # was a TypeError traceback
    assert main(["eval", "dqc", "--predictions", str(p), "--no-plot"]) == 2
    assert "score: expected numbers" in capsys.readouterr().err
    pd.DataFrame({"id": ["a", "b", "a"], "score": [0.9, 0.1, 0.9], "label": [1, 0, 1]}).to_parquet(p)
    assert main(["eval", "dqc", "--predictions", str(p), "--no-plot"]) == 2  # was counted twice
    assert "id(s) ['a']" in capsys.readouterr().err


DQC_OK = {"score": [0.2, 0.9], "label": [0, 1]}
TPS_OK = {"score_a": [0.9, 0.2], "score_b": [0.1, 0.3], "preferred": ["a", "b"]}


@pytest.mark.parametrize("command,columns,needle", [
    # before: numpy's words ("got dtype object", "setting an array element with a sequence") or, for the id, an
    # "unhashable type: 'list'" traceback
    ("dqc", {**DQC_OK, "score": [[0.2], [0.9]]}, "score: expected numbers (an integer or float column), got list<"),
    ("dqc", {**DQC_OK, "label": [[0], [1]]}, "label: expected 0/1 (1 = reasonable, 0 = failure) in an integer, float "
                                             "or boolean column, got list<"),
    ("dqc", {**DQC_OK, "label": ["0", "1"]}, "label: expected 0/1 (1 = reasonable, 0 = failure) in an integer, float "
                                             "or boolean column, got string"),
    ("dqc", {**DQC_OK, "id": [["a"], ["b"]]}, "id: expected one id per row (a string or number), got list<"),
    ("tps", {**TPS_OK, "score_b": [{"v": 0.1}, {"v": 0.3}]}, "score_b: expected numbers (an integer or float "
                                                              "column), got struct<v: double>"),
    ("tps", {**TPS_OK, "preferred": [["a"], ["b"]]}, "preferred: expected 'a' or 'b' in a string column, got list<"),
])
def test_cli_a_column_of_the_wrong_type_names_flag_file_and_column(tmp_path, capsys, command, columns, needle):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "P.parquet"
    pq.write_table(pa.table(columns), p)
    assert main(["eval", command, "--predictions", str(p)] + (["--no-plot"] if command == "dqc" else [])) == 2
    err = capsys.readouterr().err
    assert f"--predictions {p}: {needle}" in err and err.count("\n") == 1, err


def test_cli_accepted_column_types_are_unchanged(tmp_path, capsys):
    """What was scored before still is: boolean or float labels, integer scores, a categorical 'preferred'."""
    p = tmp_path / "P.parquet"
    pd.DataFrame({"score": [0, 1], "label": [False, True]}).to_parquet(p)
    assert main(["eval", "dqc", "--no-plot", "--predictions", str(p)]) == 0
    pd.DataFrame({"score": [0.2, 0.9], "label": [0.0, 1.0], "id": [1.5, 2.5]}).to_parquet(p)
    assert main(["eval", "dqc", "--no-plot", "--predictions", str(p)]) == 0
    pd.DataFrame({**TPS_OK, "preferred": pd.Categorical(["a", "b"])}).to_parquet(p)
    assert main(["eval", "tps", "--predictions", str(p)]) == 0
    assert json.loads((tmp_path / "P.tps.json").read_text()) == {"accuracy": 100.0}


def test_float32_scores_are_compared_in_their_own_precision(tmp_path):
    """A float32 0.8 is not above tau = 0.8, as numpy and sklearn see the same column (widened to float64 it is
    0.80000001 and was counted as above: acc_0.8 25 instead of 75 here)."""
    s = np.array([0.8, 0.8, 0.9, 0.7], np.float32)
    y = np.array([0, 0, 1, 1])
    got = dqc.dqc_metrics(s, y)
    assert got["acc_0.8"] == 100.0 * np.mean((s > 0.8) == y) == 75.0
    p = tmp_path / "f32.parquet"
    pd.DataFrame({"score": s, "label": y}).to_parquet(p)
    assert main(["eval", "dqc", "--predictions", str(p), "--no-plot"]) == 0
    assert json.loads((tmp_path / "f32.dqc.json").read_text())["acc_0.8"] == 75.0


def test_cli_tps_errors_name_the_file_and_nothing_is_written_until_all_files_are_valid(tmp_path, capsys):
    """``eval tps`` errors did not name the file (which of several?), a string score column said only "could not
    convert string to float"; ``eval dqc``/``tps`` wrote the JSON of the files before a bad one."""
    good, bad = tmp_path / "good.parquet", tmp_path / "bad.parquet"
    pd.DataFrame({"score_a": [0.9, 0.2], "score_b": [0.1, 0.3], "preferred": ["a", "b"]}).to_parquet(good)
    pd.DataFrame({"score_a": [0.9, 0.2], "score_b": [0.1, 0.3], "preferred": ["a", "c"]}).to_parquet(bad)
    assert main(["eval", "tps", "--predictions", str(good), str(bad)]) == 2
    assert "bad.parquet: preferred" in capsys.readouterr().err
    assert not (tmp_path / "good.tps.json").exists()
    pd.DataFrame({"score_a": ["x", "y"], "score_b": [0.1, 0.3], "preferred": ["a", "b"]}).to_parquet(bad)
    assert main(["eval", "tps", "--predictions", str(good), str(bad)]) == 2
    assert "bad.parquet: score_a: expected numbers" in capsys.readouterr().err
    ok, wrong = tmp_path / "ok.parquet", tmp_path / "wrong.parquet"
    pd.DataFrame({"score": [0.9, 0.2], "label": [1, 0]}).to_parquet(ok)
    pd.DataFrame({"score": [0.9, 0.2], "label": [1, 3]}).to_parquet(wrong)
    assert main(["eval", "dqc", "--no-plot", "--predictions", str(ok), str(wrong)]) == 2
    assert not (tmp_path / "ok.dqc.json").exists()
    assert main(["eval", "dqc", "--predictions", str(ok), "--plot", str(tmp_path / "roc.png")]) == 0
    assert (tmp_path / "roc.png").read_bytes()[:4] == b"\x89PNG" and not list(tmp_path.glob("*.tmp"))
