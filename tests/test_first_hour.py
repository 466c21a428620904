"""A new user's first hour: fixture lookup from a moved checkout, resume reports over the whole run, Ctrl-C, exit
codes and one-line errors, recursive scene folders, padded proposals masked, empty runs, help texts, and a scoring
install free of the model / training / dataset stacks."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import EPDMS_FIXTURES, SHARED
from jaxdrive.cli import EXIT_INTERRUPTED, EXIT_PARTIAL, EXIT_USAGE, build_parser, main
from jaxdrive.scoring.outputs import MANIFEST, read_results
from jaxdrive.scoring.runner import ScoreOptions, score_source
from jaxdrive.scoring.sources import SceneDirSource

REPO = Path(__file__).resolve().parents[1]


def test_fixture_lookup_works_from_a_moved_checkout(tmp_path):
    """The suite finds shared/ beside the checkout wherever the checkout lies, and says so when it is missing."""
    moved = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(REPO / "tests", moved / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pytest.ini", moved / "pytest.ini")
    os.symlink(SHARED, tmp_path / "elsewhere" / "shared")
    env = {k: v for k, v in os.environ.items() if k != "JAXDRIVE_SHARED"}
    # test_scene's first test reads and validates all 61 fixture scenes through the moved checkout's lookup
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/test_scene.py::test_all_fixture_scenes_load_and_validate"],
                       cwd=moved, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    (tmp_path / "elsewhere" / "shared").unlink()
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "tests/test_scene.py"], cwd=moved, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "shared fixtures are not at" in (r.stdout + r.stderr)


def _scene_dir(tmp_path, broken_first=True, n=6) -> Path:
    d = tmp_path / "scenes"
    d.mkdir()
    for f in sorted(EPDMS_FIXTURES.glob("scene_*.json"))[:n]:
        shutil.copy(f, d / f.name)
    if broken_first:
        (d / "scene_0000.json").write_text('{"format": "epdms-scene/1", "id": "broken"}')
    return d


class _Stop(Exception):
    pass


def test_resume_report_covers_the_whole_run(tmp_path, capsys):
    scenes = _scene_dir(tmp_path)  # 6 files, the first unreadable; shards of 2 files
    out = tmp_path / "out"
    opts = ScoreOptions(batch_size=2, shard_size=2)

    def stop_after_first(shard):
        raise _Stop

    with pytest.raises(_Stop):
        score_source(SceneDirSource(scenes), out, opts, progress=False, on_shard=stop_after_first)
    assert len(json.loads((out / MANIFEST).read_text())["completed"]) == 1
    args = ["score", "--scenes", str(scenes), "--out", str(out), "--batch-size", "2", "--shard-size", "2",
            "--no-progress", "--resume"]
    capsys.readouterr()
    # The unreadable scene was met by the first invocation; the resumed one still reports it and exits 3.
    assert main(args) == EXIT_PARTIAL
    first = capsys.readouterr()
    n_rows = len(read_results(out))
    assert f"proposals {n_rows:,}" in first.out and "scenes 5" in first.out and "not scored (errors.jsonl) 1" in first.out
    assert first.err.count("scene_0000.json") == 1  # named once, not twice
    assert (out / "summary.png").stat().st_size > 10_000
    png_before = (out / "summary.png").stat().st_size
    # Resuming a finished run reports the same whole run (no NaN table, no empty plot).
    assert main(args) == EXIT_PARTIAL
    again = capsys.readouterr()
    assert f"proposals {n_rows:,}" in again.out and "nan" not in again.out.lower()
    assert "scored nothing" in again.out
    assert abs((out / "summary.png").stat().st_size - png_before) < 2_000
    logged = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert [Path(e["name"]).name for e in logged] == ["scene_0000.json"]  # never duplicated by a resume


def test_resume_without_out_is_an_error(capsys):
    assert main(["score", "--count", "2", "--resume", "--no-progress"]) == EXIT_USAGE
    assert "--resume" in capsys.readouterr().err


def test_run_with_no_readable_scene(tmp_path, capsys):
    d = tmp_path / "bad"
    d.mkdir()
    for i in range(3):
        (d / f"s{i}.json").write_text("{not json")
    out = tmp_path / "out"
    assert main(["score", "--scenes", str(d), "--out", str(out), "--no-progress"]) == EXIT_PARTIAL
    captured = capsys.readouterr()
    assert "no scenes scored" in captured.err and "throughput" not in captured.out
    assert not list(out.glob("*.parquet")) and not (out / "summary.png").exists()
    assert len((out / "errors.jsonl").read_text().splitlines()) == 3


def test_scene_dir_recurses_into_subfolders():
    src = SceneDirSource(EPDMS_FIXTURES)
    assert len(src) == 61
    assert sum(f.parent.name == "sanity" for f in src.files) == 21


def test_summary_table_is_aligned_and_labels_ep_honestly(tmp_path, capsys):
    assert main(["score", "--count", "2", "--num-proposals", "4", "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.rstrip().endswith(("%", ",")) or " (" in line[:32]]
    metric_rows = [line for line in out.splitlines() if "(" in line[:30] and line[:30].rstrip().endswith(")")]
    assert len(metric_rows) == 11, rows
    assert len({line.index(")") < 30 for line in metric_rows}) == 1
    assert len({len(line) for line in metric_rows if "%" in line}) == 1  # the nine sub-metric rows line up
    assert "violations" not in out and "share < 1" in out


def test_padded_proposals_are_masked():
    import jax

    from jaxdrive.data.synthetic import generate_scene
    from jaxdrive.rules.epdms import score
    from jaxdrive.scene import batch_scenes

    scenes = [generate_scene(1, num_proposals=3), generate_scene(2, num_proposals=5)]
    sc, props, _ = batch_scenes(scenes)
    sub = jax.jit(score)(sc, props)  # jitted: one compile (~5 s), where op-by-op took ~40 s
    valid = np.asarray(props.valid)
    assert valid.sum() == 8
    for f in ("nc", "dac", "ep", "epdms", "pdm_score", "raw_progress"):
        v = np.asarray(getattr(sub, f))
        assert np.isnan(v[~valid]).all() and np.isfinite(v[valid]).all(), f
    assert (np.asarray(sub.nc_step)[~valid] == -1).all()
    assert not np.asarray(sub.hc_checks)[~valid].any()


@pytest.mark.parametrize("argv,needle", [
    (["train", "sft", "--config", "missing.py"], "--config: no such file"),
    (["train", "sft", "--config", "configs/sft_tiny.py", "steps=abc"], "steps=abc"),
    (["train", "sft", "--config", "configs/sft_tiny.py", "nosuchfield=1"], "nosuchfield"),
])
def test_train_config_errors_are_one_line(argv, needle, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_help_texts():
    top = build_parser().format_help()
    assert "``" not in top and "Exit status" in top
    score_help = build_parser()._subparsers._group_actions[0].choices["score"].format_help()
    assert "(default: None)" not in score_help
    for line in score_help.split("  --"):
        assert line.count("default") <= 1, line


def test_every_command_states_its_options_defaults():
    """Each (sub-)command's --help gives the default of every option that has a value as its default (only
    `jaxdrive score`'s and four others did: `vocab build --help` hid --size 256 and --from-scenes 1024), and never
    "(default: None)" (`scenes convert --help` said it of --out)."""
    import argparse

    def parsers(parser, path):
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from parsers(sub, f"{path} {name}")

    missing = []
    for path, parser in list(parsers(build_parser(), "jaxdrive"))[1:]:
        text = parser.format_help()
        assert "(default: None)" not in text and "(default: )" not in text, path
        for action in parser._actions:
            has_value = action.default not in (None, "", argparse.SUPPRESS) and action.default is not False
            if has_value and "default" not in (action.help or "") \
                    and "%(default)" not in parser._get_formatter()._get_help_string(action):
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_every_command_option_says_what_it_is_for():
    """Every option and positional argument of every (sub-)command has a help text."""
    import argparse

    def silent(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from silent(sub, f"{path} {name}")
            elif not action.help and not isinstance(action, argparse._HelpAction):
                yield f"{path} {'/'.join(action.option_strings) or action.dest}"

    assert list(silent(build_parser(), "jaxdrive")) == []


def test_preview_lists_score_fields(capsys):
    assert main(["scenes", "preview", "--color-by", "foo", "--out", "/dev/null"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "epdms" in err and "final_speed" in err


_BLOCKED_RUN = textwrap.dedent("""
    import importlib.abc, sys
    BLOCK = {"flax", "transformers", "optax", "orbax", "tensorflow_datasets", "ml_collections", "tensorboardX",
             "safetensors", "torch", "sentence_transformers"}  # (tensorflow: not installed at all)
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in BLOCK:
                raise ModuleNotFoundError(f"blocked {name}: not part of the scoring install", name=name)
    sys.meta_path.insert(0, Block())  # in the reader processes too (they import this file as __mp_main__)
    if __name__ == "__main__":
        from jaxdrive.cli import main
        sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.slow
def test_ctrl_c_cpu_devices_and_scoring_without_model_stacks(tmp_path):
    """In one subprocess: the scoring path imports none of the model / training / dataset stacks, --cpu-devices
    makes --devices 2 work on a CPU, and Ctrl-C ends with one line saying how to continue (exit 130)."""
    script = tmp_path / "blocked_run.py"
    script.write_text(_BLOCKED_RUN)
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    # 2,048 scenes: the prescan reads (and keeps) the first 256, and the run is interrupted after its first shard;
    # with 64 scenes every batch was prescanned, the shards were written in a burst of milliseconds and the run
    # sometimes ended between two polls (exit 0)
    cmd = [sys.executable, str(script), "score", "--count", "2048", "--num-proposals", "4", "--batch-size", "2",
           "--shard-size", "2", "--cpu-devices", "2", "--devices", "2", "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads((out / MANIFEST).read_text())["completed"]:
                break
        except (OSError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, stderr[-3000:]
    assert "Traceback" not in stderr and "blocked" not in stderr, stderr[-3000:]
    assert f"--resume --out {out}" in stderr


def test_preview_scores_through_a_program_kept_on_disk(tmp_path, monkeypatch):
    """kernel_values == the jitted scorer; the exported program is written once, reused, and rewritten if corrupt."""
    import jax

    from jaxdrive.data.synthetic import generate_scene
    from jaxdrive.rules.epdms import score
    from jaxdrive.scene import batch_scenes
    from jaxdrive.viz import kernel_values

    monkeypatch.setenv("JAXDRIVE_EXPORT_CACHE", str(tmp_path / "exp"))
    scene = generate_scene(3, num_proposals=5)
    sc, props, _ = batch_scenes([scene])
    want = np.asarray(jax.jit(score)(sc, props).epdms)[0, :5]
    first = kernel_values(scene, "epdms")
    files = list((tmp_path / "exp").glob("preview_epdms-*.bin"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    np.testing.assert_allclose(first, want, atol=1e-6)
    np.testing.assert_array_equal(kernel_values(scene, "epdms"), first)
    assert files[0].stat().st_mtime_ns == stamp  # reused, not re-exported
    files[0].write_bytes(b"garbage")
    np.testing.assert_array_equal(kernel_values(scene, "epdms"), first)
    assert files[0].stat().st_size > 1000
