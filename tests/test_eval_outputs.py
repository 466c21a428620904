"""What `jaxdrive eval` reads and writes: an input of another format is named as such; an output flag naming one of the command's input files is a usage error (exit 2) before
anything is written, not an input replaced by the output (a PNG over the predictions, JSON over the GT)."""
import numpy as np
import pytest

from jaxdrive.cli import main


def _planning_files(tmp_path):
    gt = np.cumsum(np.ones((2, 6, 2)), axis=1)
    np.savez(tmp_path / "gt.npz", gt=gt, occupancy=np.zeros((2, 6, 200, 200), bool))
    np.savez(tmp_path / "pred.npz", pred=gt + 0.5)
    return tmp_path / "pred.npz", tmp_path / "gt.npz"


@pytest.mark.parametrize("target", ["pred", "gt"])
def test_planning_json_over_an_input_is_refused(tmp_path, capsys, target):
    pred, gt = _planning_files(tmp_path)
    victim = {"pred": pred, "gt": gt}[target]
    before = victim.read_bytes()
    assert main(["eval", "planning", "--predictions", str(pred), "--gt", str(gt), "--json", str(victim)]) == 2
    err = capsys.readouterr().err
    flag = {"pred": "--predictions", "gt": "--gt"}[target]
    assert f"--json {victim}: is the {flag} file" in err and "Traceback" not in err, err
    assert victim.read_bytes() == before


def test_dqc_plot_over_a_predictions_file_is_refused(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p, q = tmp_path / "p.parquet", tmp_path / "q.parquet"
    for path in (p, q):
        pq.write_table(pa.table({"score": [0.2, 0.9], "label": [0, 1]}), path)
    before = q.read_bytes()
    assert main(["eval", "dqc", "--predictions", str(p), str(q), "--plot", str(q)]) == 2
    err = capsys.readouterr().err
    assert f"--plot {q}: is the --predictions file" in err and "Traceback" not in err, err
    assert q.read_bytes() == before and not (tmp_path / "p.dqc.json").exists()


@pytest.mark.parametrize("second", [["--no-plot"], ["--plot", "elsewhere.png"], ["first.parquet"]])
def test_dqc_leaves_no_earlier_plot_beside_new_metrics(tmp_path, capsys, monkeypatch, second):
    """A run that does not write P.dqc.png (--no-plot, --plot elsewhere, P no longer the first file) removes the one
    an earlier run left: it showed the earlier predictions' curves beside this run's P.dqc.json."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    for name in ("p.parquet", "first.parquet"):
        pq.write_table(pa.table({"score": [0.2, 0.9, 0.6], "label": [0, 1, 0]}), name)
    assert main(["eval", "dqc", "--predictions", "p.parquet"]) == 0
    assert (tmp_path / "p.dqc.png").exists()
    pq.write_table(pa.table({"score": [0.2, 0.9, 0.6], "label": [0, 1, 1]}), "p.parquet")  # new predictions
    argv = ["eval", "dqc", "--predictions", *(["first.parquet", "p.parquet"] if second == ["first.parquet"] else
                                              ["p.parquet", *second])]
    assert main(argv) == 0
    assert not (tmp_path / "p.dqc.png").exists(), capsys.readouterr().out
    assert "removed p.dqc.png: an earlier run's plot" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--predictions", "--gt"])
def test_planning_file_of_another_format_is_not_called_pickled_data(tmp_path, capsys, flag):
    """A parquet / text file given as .npz was "This file contains pickled (object) data. If you trust the file you
    can load it unsafely ..." (numpy's guess), which sent users after a pickle that was not there."""
    pred, gt = _planning_files(tmp_path)
    other = tmp_path / "p.parquet"
    other.write_bytes(b"PAR1 not an npz")
    argv = {"--predictions": str(pred), "--gt": str(gt), flag: str(other)}
    assert main(["eval", "planning", *[x for kv in argv.items() for x in kv]]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {other}: cannot read an .npz of arrays (not an .npz file" in err and "pickle" not in err, err


@pytest.mark.parametrize("flag", ["--predictions", "--gt"])
def test_planning_single_npy_is_named(tmp_path, capsys, flag):
    """One .npy array given as the .npz was a TypeError traceback ("'numpy.ndarray' object does not support the
    context manager protocol"): planning had its own .npz reader; it uses npz_arrays' now."""
    pred, gt = _planning_files(tmp_path)
    one = tmp_path / "one.npy"
    np.save(one, np.zeros((2, 6, 2)))
    argv = {"--predictions": str(pred), "--gt": str(gt), flag: str(one)}
    assert main(["eval", "planning", *[x for kv in argv.items() for x in kv]]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {one}: one array of shape (2, 6, 2), not an .npz of the named arrays --help lists" in err, err
