"""Throughput and peak memory of ``jaxdrive vocab`` (GTRS semantics) per scene, K in {256, 4096, 16384}, with and
without NAVSIM's LQR + bicycle simulation, end to end (vocabulary -> global poses -> simulation -> chunked scoring ->
EP normalisation -> human filter), on one converted NAVSIM metric cache (``shared/fixtures/navsim_cache``).

Each configuration runs in its own process (so ``ru_maxrss`` is that configuration's peak): one warm-up scene (compile),
then ``--repeats`` timed scenes. Prints scenes/s, proposals/s, peak RSS, the ratio of each configuration's proposals/s
to the K = 256 configuration of the same mode measured in this run (scaling), and the navtrain extrapolation:
navtrain (103,288 tokens) x K on one host of this kind.

    PYTHONPATH=$PWD python benchmarks/vocab_throughput.py [--ks 256 4096 16384] [--token scene_0007] [--chunk 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

NAVTRAIN_TOKENS = 103_288
SHARED = Path(os.environ.get("JAXDRIVE_SHARED", Path(__file__).resolve().parents[2] / "shared"))


def _one(k: int, simulate: bool, token: str, chunk: int, repeats: int) -> dict:
    import numpy as np

    from jaxdrive.data.navsim_cache import find_caches, read_cache_scene
    from jaxdrive.vocab.core import pad_for, reference_states, rows_per_call, score_vocabulary, vocabulary_states

    scene = read_cache_scene(dict(find_caches(SHARED / "fixtures" / "navsim_cache"))[token])
    rng = np.random.default_rng(0)
    t = np.linspace(0.1, 4.0, 40)[None]
    speed = rng.uniform(0.0, 15.0, (k, 1))
    curvature = rng.normal(0.0, 0.03, (k, 1))
    heading = curvature * speed * t
    vocab = np.stack([np.cumsum(speed * 0.1 * np.cos(heading), 1), np.cumsum(speed * 0.1 * np.sin(heading), 1),
                      heading], -1)
    reference = reference_states(scene)
    pad = pad_for(scene, rows_per_call(k, chunk))

    def run():
        states = vocabulary_states(scene.history_states[-1], vocab, simulate=simulate, chunk=min(chunk, k))
        return score_vocabulary(scene, vocab, reference, simulate=simulate, chunk=chunk, states=states, pad=pad)

    t0 = time.perf_counter()
    run()
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(repeats):
        out = run()
    dt = (time.perf_counter() - t0) / repeats
    assert out["epdms"].shape == (k,)
    return {"k": k, "simulate": simulate, "first_s": warm, "scene_s": dt, "scenes_per_s": 1 / dt,
            "proposals_per_s": k / dt, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main() -> None:
    from jaxdrive.malloc_tunables import reexec_with_malloc_tunables

    reexec_with_malloc_tunables()  # as ``jaxdrive vocab`` does (JAXDRIVE_MALLOC_TUNABLES=0: measure without)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ks", type=int, nargs="+", default=[256, 4096, 16384],
                   help="vocabulary sizes K (default: 256 4096 16384)")
    p.add_argument("--modes", nargs="+", default=["sim", "nosim"], choices=["sim", "nosim"],
                   help="with (sim) and / or without (nosim) the LQR + bicycle simulation (default: both)")
    p.add_argument("--token", default="scene_0007", help="scene of the fixture metric cache (default: scene_0007)")
    p.add_argument("--chunk", type=int, default=1024, help="proposals per scoring chunk (default: 1024)")
    p.add_argument("--repeats", type=int, default=1, help="timed scenes per configuration after the warm-up "
                   "(default: 1)")
    p.add_argument("--one", nargs=2, metavar=("K", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(_one(int(args.one[0]), args.one[1] == "sim", args.token, args.chunk, args.repeats)))
        return
    print(f"uptime: {os.popen('uptime').read().strip()}   cpus: {os.cpu_count()}")
    results = []
    for mode in args.modes:
        for k in args.ks:
            cmd = [sys.executable, __file__, "--one", str(k), mode, "--token", args.token, "--chunk", str(args.chunk),
                   "--repeats", str(args.repeats)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(r)
            base = next((b for b in results if b["simulate"] == r["simulate"] and b["k"] == min(args.ks)), r)
            hours = NAVTRAIN_TOKENS * r["scene_s"] / 3600
            print(f"K={k:>6} {mode:>5}: {r['scene_s']:8.2f} s/scene  {r['scenes_per_s']:8.4f} scenes/s  "
                  f"{r['proposals_per_s']:9,.0f} proposals/s  (x{r['proposals_per_s'] / base['proposals_per_s']:.2f} "
                  f"vs K={base['k']})  peak RSS {r['peak_rss_gb']:.2f} GB  first scene incl. compile "
                  f"{r['first_s']:.1f} s  navtrain x K on this host: {hours:,.0f} h", flush=True)
    print(f"uptime: {os.popen('uptime').read().strip()}")


if __name__ == "__main__":
    main()
