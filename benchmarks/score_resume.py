"""A resumed `jaxdrive score` run: its first batch (compile included) with and without the shapes the manifest records.

Starts ``jaxdrive score`` (synthetic scenes by default; any ``score`` arguments after ``--``), kills it (SIGKILL) once
its first shard is committed, copies the run directory and strips the per-shard ``shapes`` records from the copy's
manifest (what a run written before they existed holds), then resumes both, the copy first, with one XLA cache (a
fresh one in a temporary HOME, which the killed run filled). The copy's resume sizes its program from its remaining
batches alone (another program whenever they give other capacities or another PadSpec: a compile); the run's own
resume starts from the recorded shapes and finds the killed run's program in the cache. Prints each resume's wall
time and first batch (``RunStats``, from the summary) and the ratio::

    python benchmarks/score_resume.py
    python benchmarks/score_resume.py -- --scenes DIR --shard-size 64
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = ["--count", "4096", "--num-proposals", "16", "--seed", "5", "--shard-size", "256"]
FIRST_BATCH = re.compile(r"first batch incl\. compile ([0-9.]+) s")


def kill_after_first_shard(cmd: list[str], out: Path, env: dict) -> list[str]:
    """Runs ``cmd`` until ``out``'s manifest names a completed shard, then SIGKILLs it; the completed shards."""
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    completed: dict = {}
    while proc.poll() is None and not completed:
        try:
            completed = json.loads((out / "manifest.json").read_text())["completed"]
        except (OSError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if not completed:
        sys.exit("the run finished or failed before its first shard was committed: give it more scenes")
    return list(completed)


def resume(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, first batch incl. compile in seconds) of ``cmd --resume``."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd + ["--resume"], env=env, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"the resume failed (exit {r.returncode}):\n{r.stderr}")
    found = FIRST_BATCH.search(r.stdout)
    if found is None:
        sys.exit(f"the resume scored nothing (the killed run had finished?):\n{r.stdout}")
    return wall, float(found.group(1))


def score_arguments(argv: list[str]) -> list[str]:
    """The ``jaxdrive score`` arguments: those after ``--`` in ``argv`` (default: ``DEFAULT``); nothing else is
    accepted before ``--`` (``--help`` prints the usage)."""
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(prog="score_resume.py", description=__doc__.split("\n\n")[0],
                                 usage="%(prog)s [-h] [-- JAXDRIVE_SCORE_ARGS ...]",
                                 epilog="JAXDRIVE_SCORE_ARGS: `jaxdrive score` arguments after --, e.g. -- --scenes "
                                        f"DIR --shard-size 64 (default: {' '.join(DEFAULT)})")
    ap.parse_args(argv[:split])
    return argv[split + 1:] or DEFAULT


def main() -> None:
    args = score_arguments(sys.argv[1:])
    home = Path(tempfile.mkdtemp(prefix="jaxdrive-resume-bench-"))
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "JAXDRIVE_EXPORT_CACHE")}
        env["HOME"] = str(home)  # fresh XLA and traced-program caches, shared by the three runs
        out, copy = home / "run", home / "run-without-shapes"
        cmd = [sys.executable, "-m", "jaxdrive.cli", "score", *args, "--no-progress"]
        done = kill_after_first_shard(cmd + ["--out", str(out)], out, env)
        shutil.copytree(out, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        for record in manifest["completed"].values():
            record.pop("shapes", None)
        (copy / "manifest.json").write_text(json.dumps(manifest, indent=1))
        print(f"jaxdrive score {' '.join(args)}: killed after shard(s) {', '.join(done)}")
        without = resume(cmd + ["--out", str(copy)], env)
        recorded = resume(cmd + ["--out", str(out)], env)
        for name, (wall, first) in (("without recorded shapes", without), ("from recorded shapes", recorded)):
            print(f"resume {name:24s} wall {wall:6.1f} s   first batch incl. compile {first:6.2f} s")
        print(f"ratio: wall {without[0] / recorded[0]:.2f}x, first batch {without[1] / recorded[1]:.1f}x")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
