"""`jaxdrive score`: interface contract, NAVSIM parity through the CLI, device-count invariance, kill + resume, bad inputs."""

import collections
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from jaxdrive.cli import EXIT_PARTIAL, EXIT_USAGE, main
from jaxdrive.data.scene_json import read_scene
from jaxdrive.scoring.outputs import MANIFEST, read_results
from jaxdrive.scoring.runner import ScoreOptions, score_source
from jaxdrive.scoring.sources import SceneDirSource, SyntheticSource
from conftest import EPDMS_FIXTURES

FIXTURES = EPDMS_FIXTURES
REPO = Path(__file__).resolve().parents[1]
COLUMNS = ["scene_id", "proposal", "nc", "dac", "ddc", "tlc", "ep", "ttc", "lk", "hc", "ec", "pdm_score", "epdms"]
DISCRETE = ["nc", "dac", "ddc", "tlc", "ttc", "lk", "hc", "ec"]
EXPECTED_KEYS = {"nc": "no_at_fault_collisions", "dac": "drivable_area_compliance", "ddc": "driving_direction_compliance",
                 "tlc": "traffic_light_compliance", "ep": "ego_progress", "ttc": "time_to_collision_within_bound",
                 "lk": "lane_keeping", "hc": "history_comfort", "ec": "two_frame_extended_comfort",
                 "pdm_score": "pdm_score", "epdms": "epdms"}


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["scene_id", "proposal"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fixture_run")
    rc = main(["score", "--scenes", str(FIXTURES), "--out", str(out), "--batch-size", "8", "--shard-size", "16",
               "--no-progress"])
    assert rc == 0
    return out, _sorted(read_results(out))


def test_cli_contract_and_navsim_parity(fixture_run):
    out, df = fixture_run
    assert set(COLUMNS) <= set(df.columns)
    assert (out / "summary.png").stat().st_size > 10_000
    files = sorted(FIXTURES.rglob("*.json"))  # sanity/ included: --scenes recurses
    assert df["scene_id"].nunique() == len(files) == 61
    mismatches = []
    for f in files:
        sc = json.loads(f.read_text())
        rows = df[df.scene_id == sc["id"]].sort_values("proposal")
        assert list(rows.proposal) == list(range(len(sc["proposals"])))
        for (_, row), want in zip(rows.iterrows(), sc["expected"]["proposals"]):
            for col, key in EXPECTED_KEYS.items():
                w = want.get(key)
                if w is None:
                    continue
                tol = 0 if col in DISCRETE else 1e-4
                if not abs(row[col] - w) <= tol:
                    mismatches.append((sc["id"], int(row.proposal), col, row[col], w))
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:5]}"


def test_one_device_equals_eight_devices(tmp_path):
    assert len(jax.devices()) >= 8
    src = SceneDirSource(FIXTURES)
    one = score_source(src, tmp_path / "d1", ScoreOptions(batch_size=8, num_devices=1), progress=False)
    eight = score_source(src, tmp_path / "d8", ScoreOptions(batch_size=8, num_devices=8), progress=False)
    a, b = _sorted(read_results(tmp_path / "d1")), _sorted(read_results(tmp_path / "d8"))
    assert one.proposals == eight.proposals == len(a)
    pd.testing.assert_frame_equal(a[DISCRETE + ["scene_id", "proposal"]], b[DISCRETE + ["scene_id", "proposal"]])
    np.testing.assert_allclose(a[["ep", "pdm_score", "epdms"]].to_numpy(), b[["ep", "pdm_score", "epdms"]].to_numpy(),
                               rtol=0, atol=1e-6)


def _score_cmd(out, extra=(), shard_size=4):
    return [sys.executable, "-m", "jaxdrive.cli", "score", "--count", "48", "--num-proposals", "8", "--seed", "3",
            "--batch-size", "4", "--shard-size", str(shard_size), "--out", str(out), "--no-progress", *extra]


@pytest.mark.slow
def test_sigkill_then_resume_gives_identical_rows(tmp_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    full = tmp_path / "full"
    subprocess.run(_score_cmd(full), check=True, env=env, cwd=REPO, capture_output=True)
    killed = tmp_path / "killed"
    # one scene per shard: after the compile the 48 shards are written in a burst of ~5 ms each (12 shards of 4
    # finished within one 50 ms poll on a busy CI machine), so the kill lands mid-run with a fast poll
    proc = subprocess.Popen(_score_cmd(killed, shard_size=1), env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    done = 0
    while time.time() < deadline and proc.poll() is None:
        manifest = killed / MANIFEST
        if manifest.exists():
            try:
                done = len(json.loads(manifest.read_text())["completed"])
            except (json.JSONDecodeError, KeyError):
                done = 0
            if done >= 3:
                break
        time.sleep(0.005)
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = json.loads((killed / MANIFEST).read_text())["completed"]
    assert 3 <= len(partial) < 48
    r = subprocess.run(_score_cmd(killed, ["--resume"], shard_size=1), env=env, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "shards already complete (resumed)" in r.stdout
    a, b = _sorted(read_results(full)), _sorted(read_results(killed))
    assert len(a) == 48 * 8 and not a.duplicated(["scene_id", "proposal"]).any()
    pd.testing.assert_frame_equal(a, b)


def test_bad_scene_file_is_named_and_rest_is_kept(tmp_path, capsys):
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for f in sorted(FIXTURES.glob("scene_000*.json"))[:4]:
        shutil.copy(f, scenes / f.name)
    (scenes / "scene_0002.json").write_text('{"format": "epdms-scene/1", "id": "broken"}')
    # one scene id in two files, in one batch and in a later one: the first file is scored, the others named
    shutil.copy(scenes / "scene_0000.json", scenes / "scene_0000a.json")
    shutil.copy(scenes / "scene_0001.json", scenes / "zz_copy.json")
    out = tmp_path / "out"
    rc = main(["score", "--scenes", str(scenes), "--out", str(out), "--no-progress", "--batch-size", "2"])
    assert rc == EXIT_PARTIAL
    captured = capsys.readouterr()
    assert "scene_0002.json" in captured.err and "'ego'" in captured.err
    assert "scenes 3 " in captured.out and "not scored (errors.jsonl) 3" in captured.out, captured.out
    df = read_results(out)
    assert sorted(df.scene_id.unique()) == ["scene_0000", "scene_0001", "scene_0003"]
    assert not df.duplicated(["scene_id", "proposal"]).any()
    logged = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert sorted(Path(e["name"]).name for e in logged) == ["scene_0000a.json", "scene_0002.json", "zz_copy.json"]
    repeated = {Path(e["name"]).name: e["error"] for e in logged if "already scored" in e["error"]}
    assert "scene_0000.json" in repeated["scene_0000a.json"] and "scene_0001.json" in repeated["zz_copy.json"]


def test_unwritable_output_dir(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["score", "--count", "2", "--out", str(blocker / "sub"), "--no-progress"])
    assert rc == EXIT_USAGE
    assert "not writable" in capsys.readouterr().err
    assert main(["score", "--count", "2", "--out", str(blocker), "--no-progress"]) == EXIT_USAGE
    assert "is a file, expected an output directory" in capsys.readouterr().err  # it said "not writable (File exists)"


def test_resume_with_other_inputs_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["score", "--count", "2", "--num-proposals", "4", "--out", str(out), "--no-progress"]) == 0
    rc = main(["score", "--count", "3", "--num-proposals", "4", "--out", str(out), "--no-progress", "--resume"])
    assert rc == EXIT_USAGE
    assert "differs in: source" in capsys.readouterr().err
    rc = main(["score", "--count", "2", "--num-proposals", "4", "--out", str(out), "--no-progress"])
    assert rc == EXIT_USAGE
    assert "--resume" in capsys.readouterr().err


@pytest.mark.parametrize("args,needle", [
    (["--batch-size", "0"], "--batch-size"),
    (["--count", "0"], "--count"),
    (["--devices", "99"], "--devices"),
    (["--ep-mode", "reference"], "--reference-progress"),
    # found by an exploratory pass: with --scenes these were accepted and ignored
    (["--scenes", "s", "--count", "10", "--seed", "3"], "--count, --seed: only for the built-in synthetic scenes"),
    (["--scenes", "s", "--num-proposals", "4"], "--num-proposals: only for the built-in synthetic scenes"),
    (["--seed", "-1"], "--seed: expected a non-negative integer, got -1"),  # said "seed:", the library's argument
])
def test_bad_options(tmp_path, capsys, args, needle):
    rc = main(["score", "--out", str(tmp_path / "o"), "--no-progress", *args])
    assert rc == EXIT_USAGE
    assert needle in capsys.readouterr().err


def test_simulate_option_scores_navsim_tracked_states(tmp_path):
    """--simulate == scoring the states that jaxdrive.sim.simulate_trajectories makes of the 8 submitted poses."""
    import dataclasses

    from jaxdrive.sim import simulate_trajectories

    src = SyntheticSource(2, seed=5, num_proposals=4)
    score_source(src, tmp_path / "sim", ScoreOptions(batch_size=2, simulate=True), progress=False)
    got = _sorted(read_results(tmp_path / "sim"))

    class Presimulated(SyntheticSource):
        def load(self, i):
            s = super().load(i)
            init = s.proposal_states[:, 0]
            pts = s.proposal_states[:, 5::5, :3]
            c, sn = np.cos(init[:, 2])[:, None], np.sin(init[:, 2])[:, None]
            dx, dy = pts[..., 0] - init[:, None, 0], pts[..., 1] - init[:, None, 1]
            local = np.stack([c * dx + sn * dy, -sn * dx + c * dy,
                              np.angle(np.exp(1j * (pts[..., 2] - init[:, None, 2])))], -1)
            return dataclasses.replace(s, proposal_states=simulate_trajectories(init, local))

    score_source(Presimulated(2, seed=5, num_proposals=4), tmp_path / "pre", ScoreOptions(batch_size=2), progress=False)
    want = _sorted(read_results(tmp_path / "pre"))
    pd.testing.assert_frame_equal(got[DISCRETE], want[DISCRETE])
    np.testing.assert_allclose(got["raw_progress"], want["raw_progress"], atol=1e-3)


def test_scenes_generate_and_preview_coloured_by_kernel_scores(tmp_path):
    assert main(["scenes", "generate", "--count", "2", "--seed", "4", "--num-proposals", "3",
                 "--out", str(tmp_path / "gen")]) == 0
    files = sorted((tmp_path / "gen").glob("*.json"))
    assert len(files) == 2 and read_scene(files[0]).num_proposals == 3
    png = tmp_path / "p.png"
    assert main(["scenes", "preview", "--scene", str(files[0]), "--color-by", "epdms", "--out", str(png)]) == 0
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize("flag,value", [("--count", "0"), ("--num-proposals", "0"), ("--proposals", "-1"),
                                        ("--seed", "-1")])
def test_scenes_generate_rejects_a_count_below_one_by_flag(tmp_path, capsys, flag, value):
    """A negative --seed said "seed: expected ..." (the library's argument, not the flag) after creating --out."""
    assert main(["scenes", "generate", flag, value, "--out", str(tmp_path / "gen")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert ({"--count": "--count:", "--seed": "--seed:"}.get(flag, "--num-proposals:")) in err and "got" in err
    assert not (tmp_path / "gen").exists()


@pytest.mark.parametrize("store", [[], ["--store"]])
def test_scenes_generate_to_a_file_is_a_usage_error_naming_out(tmp_path, capsys, store):
    """``--out`` naming an existing file, or a folder below one, was a FileExistsError / NotADirectoryError traceback
    (exit 1) from mkdir, as JSON files and as a store."""
    (tmp_path / "f.json").write_text("{}")
    for out in (tmp_path / "f.json", tmp_path / "f.json" / "sub"):
        assert main(["scenes", "generate", "--count", "1", "--num-proposals", "1", *store,
                     "--out", str(out)]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "Traceback" not in err and f"--out {out}" in err, err
    assert (tmp_path / "f.json").read_text() == "{}"


def test_summary_names_an_input_bound_run(tmp_path, monkeypatch):
    """A source slower than the scorer: the loop's wait for input is measured over the throughput's span and the
    summary says the run is input-bound and what feeds it faster; a run that did not wait is not called so."""
    import jaxdrive.scoring.runner as runner
    from jaxdrive.data.synthetic import pad_spec

    monkeypatch.setattr(runner, "PRESCAN_SCENES", 0)  # 16 batches prescanned, the other 48 read while scoring
    monkeypatch.setattr(runner, "SAMPLED_HEADROOM", 4.0)  # no unscanned batch overflows (a recompile mid-run)
    monkeypatch.setattr(runner, "READ_AHEAD_BYTES", 0)  # two batches ahead: the slow reads are not all done
    from jaxdrive.scoring.runner import RunStats
    from jaxdrive.scoring.summary import summary_table

    class SlowSource(SyntheticSource):
        def load(self, i):
            time.sleep(0.05)
            return super().load(i)

    stats = score_source(SlowSource(128, seed=1, num_proposals=2), tmp_path / "slow",
                         ScoreOptions(batch_size=2, pad=pad_spec(2)), progress=False)
    assert stats.compiles == 1
    # end to end: this invocation's every proposal over its whole wall time, compile and prescan included
    assert stats.scored == stats.proposals == 256 and stats.wall_s > stats.compile_s + stats.score_s
    assert f"end to end {256 / stats.wall_s:,.0f} proposals/s over {stats.wall_s:.1f} s" in summary_table(stats)
    # 64 batches: the 16 prescanned ones are kept (scored in a few ms each, not read again); of the other 48, those
    # beyond the few read ahead (two in the reader, two in the queue) each wait ~0.1 s for their scenes
    assert 0.5 * stats.score_s <= stats.input_wait_s <= stats.score_s
    assert "input-bound:" in summary_table(stats) and "--workers N" in summary_table(stats)
    busy = RunStats(compile_s=1.0, score_s=2.0, scored_after_compile=100, input_wait_s=0.2)
    assert "input-bound" not in summary_table(busy)
    assert "input-bound: 80% of that time" in summary_table(RunStats(compile_s=1.0, score_s=2.0,
                                                                     scored_after_compile=100, input_wait_s=1.6))


def test_a_run_of_one_scene_per_device_compiles_once(tmp_path):
    """48 synthetic scenes (K = 8) in shards of one scene (batches of one) over the 8 test devices: each device group
    holds one scene or none, and one scene's broad-phase needs vary far more than a group of 16's (red-light pairs:
    none in most scenes, 15 in a few). The prescan reads at least ``PRESCAN_SCENES`` scenes (here every batch): no
    batch overflows, one compile. When it read 16 of the 48 batches, 5 later ones overflowed: 5 recompiles, 119 s
    instead of 20 s on a 2-core CPU (``jaxdrive score --count 48 --num-proposals 8 --seed 3 --batch-size 2
    --shard-size 1``)."""
    from jaxdrive.data.synthetic import pad_spec

    stats = score_source(SyntheticSource(48, seed=3, num_proposals=8), tmp_path / "run",
                         ScoreOptions(batch_size=2, shard_size=1, pad=pad_spec(8)), progress=False)
    assert stats.overflow_batches == 0 and stats.compiles == 1
    assert len(read_results(tmp_path / "run")) == 48 * 8


class _CountingSource(SyntheticSource):
    """Synthetic scenes that count their reads; from scene ``grow_from`` on (or only the scenes in ``grow_only``)
    10 proposals instead of 2 (PadSpec.fit rounds to multiples of 8: a larger PadSpec)."""

    def __init__(self, count: int, grow_from: int | None = None, grow_only: frozenset = frozenset()):
        super().__init__(count, seed=3, num_proposals=2)
        self.grow_from, self.grow_only, self.reads = grow_from, grow_only, collections.Counter()

    def load(self, i):
        from jaxdrive.data.synthetic import generate_scene

        self.reads[i] += 1
        more = (self.grow_from is not None and i >= self.grow_from) or i in self.grow_only
        return generate_scene(self.seed + i, num_proposals=10 if more else self.num_proposals, validate=False)


@pytest.mark.parametrize("grow_from", [None, 30])
def test_prescanned_batches_are_scored_without_reading_them_again(tmp_path, monkeypatch, grow_from):
    """20 batches, 16 of them prescanned: each scene is read once and the prescanned batches' padded arrays are
    scored as kept. When a later scan grows the PadSpec (scenes 30.. have 10 proposals), the batches padded before
    it are re-padded at the grown PadSpec (``grow_batch``), not read again. Rows equal a run that keeps nothing
    (every prescanned batch read twice)."""
    import jaxdrive.scoring.runner as runner
    from jaxdrive.data.synthetic import pad_spec

    monkeypatch.setattr(runner, "PRESCAN_SCENES", 0)  # 16 of the 20 batches
    options = ScoreOptions(batch_size=2, shard_size=8, pad=pad_spec(2))
    kept = _CountingSource(40, grow_from)
    score_source(kept, tmp_path / "kept", options, progress=False)
    monkeypatch.setattr(runner, "PRESCAN_KEEP_BYTES", 0)
    again = _CountingSource(40, grow_from)
    score_source(again, tmp_path / "again", options, progress=False)
    picks = runner.prescan_picks(20, runner.prescan_count(2))
    assert sorted(again.reads.values()) == [1] * 8 + [2] * 32  # the old behaviour: 16 batches of 2 read twice
    assert set(kept.reads.values()) == {1} and len(kept.reads) == 40
    if grow_from is not None:  # the scan that grew the PadSpec came after some kept batches (re-padded, not re-read)
        assert 0 < next(n for n, b in enumerate(picks) if 2 * b + 1 >= grow_from) < len(picks)
    pd.testing.assert_frame_equal(_sorted(read_results(tmp_path / "kept")), _sorted(read_results(tmp_path / "again")))


def test_batches_read_ahead_before_a_scene_grew_the_padspec_are_re_padded_not_read_again(tmp_path, monkeypatch):
    """The prescan misses one batch whose scenes have 10 proposals; the batches after it were read ahead at the
    PadSpec of 2 before that batch grew it. They are re-padded (``grow_batch``, whose arrays equal ``batch_scenes``'s
    at the grown PadSpec bit for bit: tests/test_scene.py), so every scene is read once (they used to be read again,
    one by one in the producer), and every scene is scored."""
    import jaxdrive.scoring.runner as runner
    from jaxdrive.data.synthetic import pad_spec

    monkeypatch.setattr(runner, "PRESCAN_SCENES", 0)  # 16 of the 20 batches
    picks = set(runner.prescan_picks(20, runner.prescan_count(2)))
    unpicked = [b for b in range(20) if b not in picks]
    assert len(unpicked) >= 2  # one to grow, at least one read ahead after it
    grow = frozenset({2 * unpicked[0], 2 * unpicked[0] + 1})
    source = _CountingSource(40, grow_only=grow)
    stats = score_source(source, tmp_path / "grown", ScoreOptions(batch_size=2, shard_size=8, pad=pad_spec(2)),
                         progress=False)
    assert set(source.reads.values()) == {1} and len(source.reads) == 40
    assert stats.compiles > 1  # the grown PadSpec is another shape
    rows = read_results(tmp_path / "grown")
    assert sorted(rows.groupby("scene_id").size().tolist()) == [2] * 38 + [10] * 2
    assert rows["epdms"].notna().all()


def test_the_reader_reads_the_run_ahead_while_the_first_batch_compiles(tmp_path, monkeypatch):
    """40 batches, 16 of them prescanned: the first step waits until every scene has been read, which happens only
    if the reader reads on while the device is busy (up to ``READ_AHEAD_BYTES``: here the whole run; with a
    read-ahead of two batches it would wait out its minute and fail)."""
    import jaxdrive.scoring.runner as runner
    from jaxdrive.data.synthetic import pad_spec

    monkeypatch.setattr(runner, "PRESCAN_SCENES", 0)  # 16 of the 40 batches
    source = _CountingSource(80)
    everything_read = threading.Event()
    load = source.load

    def load_and_count(i):
        scene = load(i)
        if len(source.reads) == len(source):
            everything_read.set()
        return scene

    source.load = load_and_count
    build, waited = runner.build_step, []

    def build_first_waits(*args, **kwargs):
        step = build(*args, **kwargs)

        def first_waits(*arrays):
            if not waited:
                waited.append(everything_read.wait(timeout=60))
            return step(*arrays)
        return first_waits

    options = ScoreOptions(batch_size=2, shard_size=8, pad=pad_spec(2))
    monkeypatch.setattr(runner, "build_step", build_first_waits)
    score_source(source, tmp_path / "ahead", options, progress=False)
    assert waited == [True] and set(source.reads.values()) == {1}
    assert len(read_results(tmp_path / "ahead")) == 80 * 2


def test_reader_processes_receive_the_source_once_not_with_every_batch(monkeypatch):
    """Six batches read by two reader processes: the source is pickled once per process (at its start), not with
    each batch (a 10,000-file directory's list took ~0.1 s per batch to unpickle); the batches come back in order,
    padded as the in-process reader pads them."""
    from jaxdrive.data.synthetic import pad_spec
    from jaxdrive.scoring.runner import Readers, read_batches

    sent = []

    def getstate(self):
        sent.append(1)
        return dict(self.__dict__)

    monkeypatch.setattr(SyntheticSource, "__getstate__", getstate, raising=False)
    source = SyntheticSource(12, seed=2, num_proposals=2)
    ranges = [(i, i + 2) for i in range(0, 12, 2)]
    got = {}
    for workers in (2, 1):
        readers = Readers(source, workers)
        try:
            got[workers] = list(read_batches(readers, ranges, lambda: pad_spec(2), 2, ahead=4))
        finally:
            readers.shutdown()
    assert 1 <= len(sent) <= 2
    want = [[f"syn_default_{i}" for i in range(a + 2, b + 2)] for a, b in ranges]  # seed 2
    assert [r[1].ids for r in got[2]] == [r[1].ids for r in got[1]] == want
    for (_, _, a), (_, _, b) in zip(got[2], got[1]):
        jax.tree.map(np.testing.assert_array_equal, a, b)


def test_auto_workers_start_reader_processes_only_for_long_runs_that_read(tmp_path, monkeypatch):
    """``--workers auto``: one reader process per core (at most ``MAX_AUTO_READERS``) for a run of at least
    ``AUTO_READER_SCENES`` scenes to read or generate; 1 for shorter runs and for a store's padded copy."""
    import jaxdrive.scoring.runner as runner
    from jaxdrive.data.store import write_store
    from jaxdrive.data.synthetic import iter_scenes, pad_spec
    from jaxdrive.scoring.sources import SceneStoreSource

    long = runner.AUTO_READER_SCENES
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert runner.auto_workers(SyntheticSource(long - 1), pad_spec(16)) == 1
    assert runner.auto_workers(SyntheticSource(long), pad_spec(16)) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert runner.auto_workers(SyntheticSource(long), pad_spec(16)) == runner.MAX_AUTO_READERS
    write_store(iter_scenes(3, 0, 2), tmp_path / "store")
    store = SceneStoreSource(tmp_path / "store")
    monkeypatch.setattr(runner, "AUTO_READER_SCENES", 3)
    assert runner.auto_workers(store, store.pad_spec()) == 1  # batches are slices of the padded copy
    assert runner.auto_workers(store, pad_spec(64)) == runner.MAX_AUTO_READERS  # no copy at that PadSpec: decoded


@pytest.mark.slow  # four scoring runs, three compiles
def test_a_later_run_loads_the_scoring_program_without_tracing(tmp_path, monkeypatch):
    """The scoring program is traced once per machine (``jaxdrive.exported.cached_jit``): the first run exports it,
    a later run loads it without tracing the scorer and gives the same rows; other static options (``ep_mode``) make
    another program. ``RunStats.compiles`` counts programs built either way. Each run but "memory" starts as a new
    process would (nothing in ``exported._IN_MEMORY``); "memory" follows "first" in the same process and calls its
    compiled program: no trace, no read from disk. (A corrupt entry, a program ``jax.export`` refuses: tests/
    test_xla_cache.py, on ``cached_jit`` itself.)"""
    import collections
    import dataclasses

    import jaxdrive.scoring.runner as runner
    from jaxdrive import exported
    from jaxdrive.data.synthetic import pad_spec

    monkeypatch.setenv("JAXDRIVE_EXPORT_CACHE", str(tmp_path / "exp"))
    loads = []
    real_load = exported._load
    monkeypatch.setattr(exported, "_load", lambda path: loads.append(path) or real_load(path))
    traces = []
    real = runner.score_with_overflow
    monkeypatch.setattr(runner, "score_with_overflow", lambda *a, **k: traces.append(1) or real(*a, **k))
    options = ScoreOptions(batch_size=2, shard_size=8, pad=pad_spec(2))
    programs = lambda: sorted((tmp_path / "exp").glob("score_step-*.bin"))
    seen = {}
    for name, opts in (("first", options), ("memory", options), ("second", options),
                       ("batch", dataclasses.replace(options, ep_mode="batch"))):
        if name != "memory":
            monkeypatch.setattr(exported, "_IN_MEMORY", collections.OrderedDict())
        loads.clear()
        before = len(traces)
        stats = score_source(_CountingSource(8, None), tmp_path / name, opts, progress=False)
        seen[name] = (len(traces) - before, stats.compiles, programs(), len(loads))
    assert seen["first"][:2] == (1, 1) and len(seen["first"][2]) == 1
    assert seen["memory"] == (0, 1, seen["first"][2], 0)  # reused: not even loaded
    assert seen["second"] == (0, 1, seen["first"][2], 1)  # loaded, not traced
    assert seen["batch"][:2] == (1, 1) and len(seen["batch"][2]) == 2
    first = _sorted(read_results(tmp_path / "first"))
    for name in ("memory", "second"):
        pd.testing.assert_frame_equal(_sorted(read_results(tmp_path / name)), first)


class _Interrupted(Exception):
    """Stands for a kill of the run (raised by ``on_shard`` once the first shard is committed)."""


def _interrupt(shard):
    raise _Interrupted(shard)


def test_a_resume_scores_at_the_interrupted_runs_shapes(tmp_path, monkeypatch):
    """A run interrupted after its first shard, whose scenes (10 proposals) grew the PadSpec and the capacities: the
    resume's remaining scenes (2 proposals each) alone would fix smaller ones, another program (~20 s of compile on
    this CPU, ~100 s on a GPU). Each shard's record keeps the shapes the run had reached and the resume starts from
    them: no program is traced or built for it, and its rows equal an uninterrupted run's. A record of another
    device count, or one that is not ours, is passed over."""
    import jaxdrive.scoring.runner as runner
    from jaxdrive import exported
    from jaxdrive.broadphase import PackSpec
    from jaxdrive.data.synthetic import pad_spec
    from jaxdrive.scene import PadSpec
    from jaxdrive.scoring.outputs import RunDir

    monkeypatch.setenv("JAXDRIVE_EXPORT_CACHE", str(tmp_path / "exp"))
    monkeypatch.setattr(exported, "_IN_MEMORY", collections.OrderedDict())
    traces = []
    real = runner.score_with_overflow
    monkeypatch.setattr(runner, "score_with_overflow", lambda *a, **k: traces.append(1) or real(*a, **k))
    options = ScoreOptions(batch_size=2, shard_size=2, pad=pad_spec(2))
    source = _CountingSource(12, grow_only=frozenset({0, 1}))
    out = tmp_path / "out"
    with pytest.raises(_Interrupted):
        score_source(source, out, options, progress=False, on_shard=_interrupt)
    record = json.loads((out / MANIFEST).read_text())["completed"]["0"]["shapes"]
    assert record["pad"]["proposals"] == 16 and record["devices"] == jax.local_device_count()
    assert len(traces) == 1
    stats = score_source(source, out, options, resume=True, progress=False)
    assert len(traces) == 1 and stats.compiles == 1  # the interrupted run's program, reused
    assert dataclasses.asdict(stats.capacity) == record["capacity"] and dataclasses.asdict(stats.pad) == record["pad"]
    fresh = tmp_path / "fresh"
    score_source(_CountingSource(12, grow_only=frozenset({0, 1})), fresh, options, progress=False)
    pd.testing.assert_frame_equal(read_results(out), read_results(fresh))

    run = RunDir(out, json.loads((out / MANIFEST).read_text())["identity"], resume=True)
    assert runner.resumed_shapes(run, jax.local_device_count(), 2) == (PackSpec(**record["capacity"]),
                                                                       PadSpec(**record["pad"]))
    assert runner.resumed_shapes(run, 1, 2) == (None, None)  # scored on 8 devices, resumed on one: per-group sizes
    assert runner.resumed_shapes(run, jax.local_device_count(), 4) == (None, None)
    for bad in ({**record, "pad": {**record["pad"], "agents": "32"}}, {**record, "capacity": None}, "shapes"):
        run.completed = {"0": {**run.completed["0"], "shapes": bad}}
        assert runner.resumed_shapes(run, jax.local_device_count(), 2) == (None, None)


def test_resume_scores_again_the_shard_of_an_edited_scene_file(tmp_path, capsys):
    """A scene file edited between an interrupted run and its resume: the shard holding it is scored again (the digest
    of its files' sizes and modification times differs from the one the manifest recorded), and the resume names the
    file; the rows equal a fresh run over the edited files. The resume used to keep the old rows silently."""
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for f in sorted(FIXTURES.glob("scene_000*.json"))[:6]:
        shutil.copy(f, scenes / f.name)
    options = ScoreOptions(batch_size=2, shard_size=2)
    out = tmp_path / "out"
    with pytest.raises(_Interrupted):
        score_source(SceneDirSource(scenes), out, options, progress=False, on_shard=_interrupt)
    assert "0" in json.loads((out / MANIFEST).read_text())["completed"]  # shard 0: scene_0000, scene_0001
    edited = json.loads((FIXTURES / "scene_0007.json").read_text())  # other geometry and proposals, same id
    (scenes / "scene_0000.json").write_text(json.dumps({**edited, "id": "scene_0000"}))
    score_source(SceneDirSource(scenes), out, options, resume=True, progress=False)
    said = capsys.readouterr().err
    fresh = tmp_path / "fresh"
    score_source(SceneDirSource(scenes), fresh, options, progress=False)
    pd.testing.assert_frame_equal(read_results(out), read_results(fresh))
    assert "scoring shard 0 again: its input files changed since it was scored (size or modification time): " \
           "scene_0000.json\n" in said, said


def test_resume_scores_again_a_missing_or_corrupt_middle_shard(tmp_path, capsys):
    """Shard 2 of 6 deleted and shard 4 cut short after the run: the manifest names them complete, but a resume checks
    every completed shard's file (present, its parquet footer readable, the recorded row count) and scores those
    shards again: the rows equal the uninterrupted run's, in order. A cut file used to be kept (and failed the
    reads)."""
    from jaxdrive.data.synthetic import pad_spec
    from jaxdrive.scoring.outputs import shard_name

    source = SyntheticSource(12, seed=4, num_proposals=2)
    options = ScoreOptions(batch_size=2, shard_size=2, pad=pad_spec(2))
    full = tmp_path / "full"
    score_source(source, full, options, progress=False)
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    (resumed / shard_name(2)).unlink()
    cut = resumed / shard_name(4)
    cut.write_bytes(cut.read_bytes()[:cut.stat().st_size // 2])
    stats = score_source(source, resumed, options, resume=True, progress=False)
    assert stats.skipped_shards == 4 and stats.scenes == 4
    pd.testing.assert_frame_equal(read_results(resumed), read_results(full))
    said = capsys.readouterr().err
    assert f"scoring shard 2 again: {shard_name(2)} is missing" in said
    assert f"scoring shard 4 again: {shard_name(4)} is unreadable" in said


def test_a_resume_leaves_only_the_manifests_shard_files(tmp_path, capsys):
    """A resume scores again a shard whose only scene file became unreadable: the shard now has no rows, so no file,
    and its old ``part-00001.parquet`` used to stay, read with the run's by anyone reading ``OUT/part-*.parquet``
    (the README's output); so did a shard file written just before a kill. Every shard file the manifest does not
    name is removed when the run directory is opened, and the summary says why the resume scored nothing."""
    from jaxdrive.scoring.outputs import completed_files, shard_name

    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for f in sorted(FIXTURES.glob("scene_000*.json"))[:2]:
        shutil.copy(f, scenes / f.name)
    out = tmp_path / "out"
    args = ["score", "--scenes", str(scenes), "--batch-size", "1", "--shard-size", "1", "--out", str(out),
            "--no-progress"]
    assert main(args) == 0
    shutil.copy(out / shard_name(0), out / shard_name(7))  # as if written just before a kill, not committed
    (scenes / "scene_0001.json").write_text("{")
    capsys.readouterr()
    assert main([*args, "--resume"]) == EXIT_PARTIAL
    assert sorted(out.glob("part-*.parquet")) == completed_files(out) == [out / shard_name(0)]
    assert {sid for f in out.glob("part-*.parquet") for sid in pd.read_parquet(f).scene_id} == {"scene_0000"}
    # the summary said "every shard was already complete" of a resume that scored shard 1 again, without rows
    assert "this invocation scored nothing: none of the 1 scene(s) it read could be scored" in capsys.readouterr().out


def test_a_new_run_refuses_an_out_holding_shard_files_without_a_manifest(tmp_path, capsys):
    """Shard files in --out but no manifest.json (another run's, its manifest deleted): a new run used to write its
    shards beside them, and ``OUT/part-*.parquet`` mixed the two runs' rows. Refused (exit 2), naming the files."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00005.parquet").write_bytes(b"old")
    for resume in ([], ["--resume"]):  # --resume said "holds no run yet ...; starting the run there" first
        rc = main(["score", "--count", "2", "--num-proposals", "2", "--out", str(out), "--no-progress", *resume])
        assert rc == EXIT_USAGE
        err = capsys.readouterr().err
        assert err.startswith("jaxdrive score: --out ") and err.count("\n") == 1, err
        assert "holds 1 shard file(s) (part-00005.parquet, ...) but no manifest.json" in err
        assert sorted(p.name for p in out.iterdir()) == ["part-00005.parquet"]


def test_the_summary_of_a_multi_process_run_speaks_for_process_0():
    """Found by a walk-through: a 2-process --resume where process 1 scored its 4 shards printed "shards already
    complete (resumed) 4" then "this invocation scored nothing: every shard was already complete" (process 0's own
    timings, which print the table, spoken for the whole invocation)."""
    from jaxdrive.scoring.runner import RunStats
    from jaxdrive.scoring.summary import summary_table

    idle = RunStats(skipped_shards=4)
    assert "this invocation scored nothing: every shard was already complete" in summary_table(idle)
    table = summary_table(idle, processes=2)
    assert "process 0 of 2 scored nothing: its shards were already complete" in table
    assert "this invocation" not in table and "every shard" not in table
    busy = summary_table(RunStats(compile_s=1.0, score_s=2.0, scored_after_compile=100, wall_s=4.0), processes=2)
    assert "process 0 of 2: first batch incl. compile 1.00 s" in busy
    assert "\n                end to end " in busy  # aligned under the text after "process 0 of 2: "
