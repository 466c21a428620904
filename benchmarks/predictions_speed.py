"""NAVSIM's official evaluation, jaxdrive vs NAVSIM, end to end on this CPU, measured in one run.

1. **Fixture caches** (``shared/fixtures/navsim_cache``: 61 metric caches, 148 agents of ``navsim_official``):
   * NAVSIM: ``benchmarks/navsim_pdm_score_loop.py`` (import, then per agent: lzma + pickle load of the cache and
     ``pdm_score`` with the one-stage script's defaults), in a subprocess;
   * jaxdrive: ``jaxdrive scenes from-navsim`` (the conversion, once per cache set) and ``jaxdrive score
     --predictions`` with the three agent positions as three named agents in one file (import, read, simulate, score,
     EC, NAVSIM's outputs), each a subprocess, timed whole; the score run cold (empty XLA cache) and warm (the
     persistent cache of the cold run).
   The ratio printed is NAVSIM's wall time over jaxdrive's, for convert + score cold, and for score warm.
2. **navtest-sized** (``--tokens``, default 12,146): the converted fixture scenes replicated under new tokens (and new
   log names, so no two frames pair by log) with one agent each (poses and previous-frame poses of the fixture), then
   ``jaxdrive score --predictions`` end to end: wall time and peak RSS of the process (``ru_maxrss`` of the child),
   warm. ``--profile`` adds the run's own breakdown (``JAXDRIVE_PREDICTIONS_PROFILE=1``: read, simulate, pair
   scenes, pad/batch, kernel, EC, output).

The load average is printed first: on a shared 2-core machine the figures scale with the cores actually free.

    PYTHONPATH=. python benchmarks/predictions_speed.py \\
        --navsim-python /tmp/navsim_venv/bin/python --nuplan-git /work/.mirror/motional+nuplan-devkit/repo

``--navsim-python``: a Python with NAVSIM's scoring dependencies (numpy, scipy, shapely, pandas, pyquaternion, retry,
geopandas); ``--nuplan-git``: a nuPlan-devkit git directory at the vendored commit (e924167), for the six files of it
that ``navsim.evaluate.pdm_score`` imports and ``shared/vendor/navsim-src`` lacks (copied with the vendor tree into a
temporary folder, never into jaxdrive). ``--skip-navsim`` / ``--tokens 0`` leave a part out.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("JAXDRIVE_SHARED", ROOT.parent / "shared"))
if not (SHARED / "fixtures").is_dir():
    SHARED = Path("/work/shared")
NUPLAN_FILES = ["nuplan/common/geometry/convert.py", "nuplan/planning/simulation/planner/ml_planner/__init__.py",
                "nuplan/planning/simulation/planner/ml_planner/transform_utils.py",
                "nuplan/planning/metrics/utils/state_extractors.py", "nuplan/common/actor_state/transform_state.py",
                "nuplan/planning/simulation/history/simulation_history.py"]


def timed(cmd: list[str], env: dict | None = None, cwd=None) -> tuple[float, int, str]:
    """(wall s, peak RSS of the child in MiB, stdout+stderr) of one subprocess."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    p = subprocess.run(cmd, env={**os.environ, **(env or {})}, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if p.returncode not in (0,):
        sys.exit(f"{' '.join(map(str, cmd))}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return wall, (peak if peak > before else -1) // 1024, p.stdout + p.stderr


def navsim_overlay(nuplan_git: Path, into: Path) -> Path:
    out = into / "navsim-src"
    shutil.copytree(SHARED / "vendor" / "navsim-src", out)
    for f in NUPLAN_FILES:
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        (out / f).write_bytes(subprocess.run(["git", "--git-dir", str(nuplan_git), "show", f"e924167:{f}"],
                                             check=True, capture_output=True).stdout)
    return out


def agents_file(path: Path) -> int:
    """The fixture's agents as three named agents (``first``, ``middle``, ``last`` position of each scene)."""
    import numpy as np

    keys, n = {}, 0
    for f in sorted((SHARED / "fixtures" / "navsim_official").glob("*.json")):
        o = json.loads(f.read_text())
        for name, a in zip(("first", "middle", "last"), o["agents"]):
            keys[f"{name}/{o['token']}"] = np.asarray(a["poses"])
            if a["previous_frame_poses"] is not None:
                keys[f"{name}/{o['token']}/previous_frame_poses"] = np.asarray(a["previous_frame_poses"])
            n += 1
    np.savez(path, **keys)
    return n


def replicate(scenes: Path, out: Path, tokens: int, predictions: Path) -> None:
    """``tokens`` scene files: the converted fixture scenes round-robin under new ids and log names, and one agent
    (each scene's last fixture agent, with its previous frame) for every one of them, as a parquet file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True)
    sources = sorted(scenes.glob("*.json"))
    texts = {f.stem: json.loads(f.read_text()) for f in sources}
    agents = {f.stem: json.loads(f.read_text())["agents"][-1]
              for f in sorted((SHARED / "fixtures" / "navsim_official").glob("*.json"))}
    rows = {"token": [], "poses": [], "previous_frame_poses": []}
    for i in range(tokens):
        stem = sources[i % len(sources)].stem
        scene = dict(texts[stem])
        token = f"{stem}_r{i:05d}"
        scene["id"] = token
        scene["generator"] = dict(scene.get("generator") or {}, log_name=f"log_r{i:05d}")
        (out / f"{token}.json").write_text(json.dumps(scene))
        a = agents[stem]
        rows["token"].append(token)
        rows["poses"].append(np.asarray(a["poses"]).ravel().tolist())
        rows["previous_frame_poses"].append(None if a["previous_frame_poses"] is None
                                            else np.asarray(a["previous_frame_poses"]).tolist())
    pq.write_table(pa.table(rows), predictions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--navsim-python", default=sys.executable,
                    help="a Python with NAVSIM's scoring dependencies (default: this one)")
    ap.add_argument("--nuplan-git", type=Path, default=Path("/work/.mirror/motional+nuplan-devkit/repo"),
                    help="nuPlan-devkit git directory holding commit e924167")
    ap.add_argument("--skip-navsim", action="store_true", help="leave NAVSIM's loop (and the ratios) out")
    ap.add_argument("--tokens", type=int, default=12146, help="navtest-sized run (0: skip)")
    ap.add_argument("--profile", action="store_true", help="the navtest-sized run's own breakdown")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on "
          f"{os.cpu_count()} CPUs", flush=True)
    jaxdrive = [sys.executable, "-c", "import sys; from jaxdrive.cli import main; sys.exit(main())"]
    env = {"PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        results = {}
        if not args.skip_navsim:
            overlay = navsim_overlay(args.nuplan_git, tmp)
            wall, _, out = timed([args.navsim_python, str(ROOT / "benchmarks" / "navsim_pdm_score_loop.py"),
                                  str(SHARED / "fixtures")], env={"PYTHONPATH": str(overlay)})
            navsim = json.loads(out.strip().splitlines()[-1])
            results["navsim"] = wall
            print(f"NAVSIM pdm_score loop: {wall:.1f} s wall for {navsim['agents']} agents (import "
                  f"{navsim['import_s']:.1f} s, cache loads {navsim['load_s']:.1f} s, pdm_score "
                  f"{navsim['score_s']:.1f} s; max |pdm_score - fixture| {navsim['max_abs_pdm_score_diff']:.1e})",
                  flush=True)
        n = agents_file(tmp / "P.npz")
        convert, _, _ = timed(jaxdrive + ["scenes", "from-navsim", str(SHARED / "fixtures" / "navsim_cache"), "--out",
                                          str(tmp / "scenes")], env=env)
        cache = {"JAX_COMPILATION_CACHE_DIR": str(tmp / "xla")}
        score = jaxdrive + ["score", "--scenes", str(tmp / "scenes"), "--predictions", str(tmp / "P.npz"),
                            "--no-progress"]
        cold, peak_cold, _ = timed(score + ["--out", str(tmp / "cold")], env={**env, **cache})
        warm, peak_warm, _ = timed(score + ["--out", str(tmp / "warm")], env={**env, **cache})
        print(f"jaxdrive: scenes from-navsim {convert:.1f} s; score --predictions ({n} agents, 3 named agents in one "
              f"run) cold {cold:.1f} s (peak {peak_cold} MiB), warm {warm:.1f} s", flush=True)
        if "navsim" in results:
            print(f"ratio NAVSIM / jaxdrive: {results['navsim'] / (convert + cold):.2f}x (convert + score, cold XLA "
                  f"cache), {results['navsim'] / warm:.2f}x (score, warm)", flush=True)
        if args.tokens:
            replicate(tmp / "scenes", tmp / "big", args.tokens, tmp / "big.parquet")
            big = jaxdrive + ["score", "--scenes", str(tmp / "big"), "--predictions", str(tmp / "big.parquet"),
                              "--no-progress", "--out", str(tmp / "big_out")]
            prof = {"JAXDRIVE_PREDICTIONS_PROFILE": "1"} if args.profile else {}
            wall, peak, out = timed(big, env={**env, **cache, **prof})
            print(f"navtest-sized: {args.tokens} tokens, score --predictions {wall:.1f} s wall, peak RSS {peak} MiB "
                  f"(warm XLA cache); NAVSIM's loop at its rate here: "
                  f"{results['navsim'] / n * args.tokens / 60:.1f} min" if "navsim" in results else
                  f"navtest-sized: {args.tokens} tokens, {wall:.1f} s wall, peak RSS {peak} MiB", flush=True)
            if args.profile:
                lines = [line for line in out.splitlines() if line.startswith("profile")]
                print("\n".join(lines))
                inside = sum(float(line.split()[-2]) for line in lines)
                print(f"profile {'start-up (python, imports)':<28} {wall - inside:8.2f} s   (wall - the phases)")


if __name__ == "__main__":
    main()
