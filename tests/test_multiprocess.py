"""Multi-controller runs on localhost through launch/local.py: 2 processes x 4 CPU devices train like 1 process x 8
devices, also when one process is killed mid-run and the job is rerun (resume from the multi-host orbax
checkpoint); 2 scoring processes write disjoint shards whose union is the
single-process output, with one manifest; a killed scoring process makes its peer fail with a clear message within
the peer timeout, and ``--resume`` then completes the run with exactly the uninterrupted rows."""
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jaxdrive.cli import main
from jaxdrive.scoring.outputs import MANIFEST, PROGRESS, read_results

REPO = Path(__file__).resolve().parent.parent
SCORE = ["score", "--count", "12", "--shard-size", "2", "--batch-size", "2", "--num-proposals", "4", "--no-progress"]
SHARDS = 6


def launch(command: list[str], processes: int, cpu_devices: int, *, env: dict | None = None, timeout: float = 500,
           grace: float = 60) -> tuple[int, str]:
    """Runs ``command`` through launch/local.py; (status, combined output). The launcher kills its processes when it
    ends; it is terminated (never left running) if it outlives ``timeout``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_NUM", "JAX_PROCESS", "JAX_COORD"))}
    full_env.update(PYTHONPATH=str(REPO), **(env or {}))
    proc = subprocess.Popen([sys.executable, str(REPO / "launch" / "local.py"), "-n", str(processes), "-m",
                             str(cpu_devices), "--timeout", str(timeout), "--grace", str(grace), "--", *command],
                            cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout + grace + 60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # passed on as Ctrl-C; what is left after --grace is killed
            proc.wait(grace + 30)
    return proc.returncode, out


def _losses(workdir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["train/loss"]) for r in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines())
            if "train/loss" in r]


# Process 1 runs the real CLI but SIGKILLs itself when it is about to compute step 3 (checkpoints 1 and 2 written).
KILLED_BEFORE_STEP_3 = textwrap.dedent("""
    import os, signal, sys
    from jaxdrive import distributed
    from jaxdrive.cli import main

    distributed.initialize_from_env()
    if distributed.process_index() == 1:
        from jaxdrive.train.trainer import Trainer

        real = Trainer.update
        def update(self, micro_batches, key):
            if self.step == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(self, micro_batches, key)
        Trainer.update = update
    sys.exit(main(sys.argv[1:]))
""")


def _last_losses(workdir: Path) -> dict[int, float]:
    """step -> loss of the last record of each step (a resumed run logs the steps after its checkpoint again)."""
    return {step: loss for step, loss in _losses(workdir)}


@pytest.mark.slow
def test_two_processes_train_like_one_with_eight_devices_and_resume_after_a_kill(tmp_path):
    train = ["train", "sft", "--config", "configs/sft_tiny.py", "steps=3", "optim.warmup_steps=0", "mesh.enabled=True",
             "mesh.data=8", "log_every=1", "progress=False", "checkpoint.every=1", "checkpoint.async_save=False"]
    rc, out = launch([sys.executable, "-m", "jaxdrive.cli", *train, f"workdir={tmp_path / 'one'}",
                      f"export_dir={tmp_path / 'one' / 'model'}"], 1, 8)
    assert rc == 0, out
    driver = tmp_path / "driver.py"
    driver.write_text(KILLED_BEFORE_STEP_3)
    two = [*train, f"workdir={tmp_path / 'two'}"]
    rc, out = launch([sys.executable, str(driver), *two], 2, 4, env={"JAXDRIVE_PEER_TIMEOUT_S": "10"})
    assert rc not in (0, 124) and "process 1 exited with status -9" in out, out
    assert "process 1 stopped responding" in out and "grace period over" not in out, out  # process 0 stopped itself
    assert sorted(_last_losses(tmp_path / "two")) == [1, 2]
    assert (tmp_path / "two" / "checkpoints" / "2").is_dir()  # written by both processes (orbax multi-host)
    rc, out = launch([sys.executable, "-m", "jaxdrive.cli", *two, f"export_dir={tmp_path / 'two' / 'model'}"], 2, 4)
    assert rc == 0, out
    assert "[p1] [step" not in out and "[p0] [step 1]" not in out  # process 0 logs; the rerun resumed after step 2
    one, both = _last_losses(tmp_path / "one"), _last_losses(tmp_path / "two")
    assert sorted(one) == sorted(both) == [1, 2, 3]
    np.testing.assert_allclose([both[s] for s in (1, 2, 3)], [one[s] for s in (1, 2, 3)], rtol=0, atol=1e-5)
    assert len({round(v, 4) for v in one.values()}) == 3  # the steps really train
    # the exported model (gathered from both processes, written by process 0) equals the single-process one; Adam
    # (lr 1e-2) turns float32 reduction-order differences of the gradients into ~1e-5 weight differences, so 1e-4
    from safetensors.numpy import load_file

    files = sorted(p.name for p in (tmp_path / "one" / "model").glob("*.safetensors"))
    assert files and files == sorted(p.name for p in (tmp_path / "two" / "model").glob("*.safetensors"))
    for name in files:
        a, b = load_file(tmp_path / "one" / "model" / name), load_file(tmp_path / "two" / "model" / name)
        assert sorted(a) == sorted(b)
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=0, atol=1e-4, err_msg=k)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> pd.DataFrame:
    """The single-process output (one device, in this process)."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main([*SCORE, "--devices", "1", "--out", str(out)]) == 0
    return _sorted(read_results(out))


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["scene_id", "proposal"]).reset_index(drop=True)


def _check_complete_run(out: Path, reference: pd.DataFrame) -> dict:
    manifest = json.loads((out / MANIFEST).read_text())
    assert sorted(map(int, manifest["completed"])) == list(range(SHARDS))
    assert not (out / PROGRESS).exists() and not list(out.glob("*.tmp"))
    scenes = [set(pd.read_parquet(out / v["file"])["scene_id"]) for v in manifest["completed"].values()]
    assert sum(map(len, scenes)) == len(set().union(*scenes)) == 12  # disjoint shards, every scene once
    pd.testing.assert_frame_equal(_sorted(read_results(out)), reference)
    return manifest


@pytest.mark.slow
def test_two_scoring_processes_write_disjoint_shards_and_one_manifest(tmp_path, reference):
    out = tmp_path / "run"
    rc, text = launch([sys.executable, "-m", "jaxdrive.cli", *SCORE, "--out", str(out)], 2, 1)
    assert rc == 0, text
    manifest = _check_complete_run(out, reference)
    assert {int(k): v["process"] for k, v in manifest["completed"].items()} == {i: i % 2 for i in range(SHARDS)}
    assert "[p0] results:" in text and "[p1] results:" not in text  # one summary, from process 0


# Process 1 runs the real CLI but SIGKILLs itself right after committing its first shard.
KILLED_AFTER_FIRST_SHARD = textwrap.dedent("""
    import os, signal, sys
    from jaxdrive import distributed
    from jaxdrive.cli import main

    distributed.initialize_from_env()
    if distributed.process_index() == 1:
        import jaxdrive.scoring.runner as runner

        real = runner.score_source
        runner.score_source = lambda *a, **k: real(*a, **k, on_shard=lambda shard: os.kill(os.getpid(), signal.SIGKILL))
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.slow
def test_killed_scoring_process_fails_clearly_then_resume_completes(tmp_path, reference):
    out = tmp_path / "run"
    driver = tmp_path / "driver.py"
    driver.write_text(KILLED_AFTER_FIRST_SHARD)
    env = {"JAXDRIVE_PEER_TIMEOUT_S": "10"}
    rc, text = launch([sys.executable, str(driver), *SCORE, "--out", str(out)], 2, 1, env=env)
    assert rc not in (0, 124), text
    assert "process 1 exited with status -9" in text, text
    assert "process 1 stopped responding" in text and "--resume" in text, text  # process 0's own message
    assert "process 0 exited with status 1" in text and "grace period over" not in text, text  # it stopped itself
    assert not (out / MANIFEST).exists()
    killed = json.loads((out / PROGRESS / "process-1.json").read_text())["completed"]
    assert list(killed) == ["1"]  # its one committed shard is kept

    rc, text = launch([sys.executable, "-m", "jaxdrive.cli", *SCORE, "--out", str(out), "--resume"], 2, 1, env=env)
    assert rc == 0, text
    assert "shards already complete (resumed)" in text
    _check_complete_run(out, reference)


def test_resume_with_one_process_folds_in_an_interrupted_multi_process_run(tmp_path):
    """The union of the manifest and every process's progress record is complete, whatever the process count of the
    resume; stale temp files go; another run's directory is refused as before."""
    from jaxdrive.scoring.outputs import MANIFEST_VERSION, RunDir, RunDirError, shard_name

    identity = {"source": "x", "shard_size": 2}
    out = tmp_path / "run"
    (out / PROGRESS).mkdir(parents=True)
    for shard, process in ((0, 0), (1, 1), (2, 0)):
        pd.DataFrame({"scene_id": [f"s{shard}"], "proposal": [0]}).to_parquet(out / shard_name(shard))
    record = lambda shards, p: {"version": MANIFEST_VERSION, "identity": identity,  # noqa: E731
                                "completed": {str(s): {"file": shard_name(s), "rows": 1, "errors": [], "process": p}
                                              for s in shards}}
    (out / PROGRESS / "process-0.json").write_text(json.dumps(record([0, 2], 0)))
    (out / PROGRESS / "process-1.json").write_text(json.dumps(record([1], 1)))
    (out / PROGRESS / "process-1.json.tmp").write_text("{")
    (out / (shard_name(3) + ".tmp")).write_text("partial")
    with pytest.raises(RunDirError, match="already holds a run"):
        RunDir(out, identity, resume=False)
    with pytest.raises(RunDirError, match="differs in: shard_size"):
        RunDir(out, {**identity, "shard_size": 3}, resume=True)
    run = RunDir(out, identity, resume=True)
    assert [run.is_done(i) for i in range(4)] == [True, True, True, False]
    assert sorted(json.loads((out / MANIFEST).read_text())["completed"]) == ["0", "1", "2"]
    assert not (out / PROGRESS).exists() and not list(out.glob("*.tmp"))


def test_importing_the_cli_leaves_the_jax_backend_uninitialised():
    """``jax.distributed.initialize`` (a launched job's first step in ``jaxdrive.cli.main``) must precede any use of
    the backend, so importing the CLI and what it imports at module level must not create a JAX array."""
    code = ("import jaxdrive.cli, jaxdrive.data.store, jaxdrive.scoring.sources\n"
            "from jax._src import xla_bridge\n"
            "assert not xla_bridge._backends, 'a JAX backend was initialised on import'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
