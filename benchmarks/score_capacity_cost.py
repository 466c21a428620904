"""What unused broad-phase capacity costs: the jitted scorer's CPU time per step at the batch's own needs (x1.25, as
``jaxdrive score`` sizes a run), at twice that, and at ``jaxdrive.score``'s defaults, in one process.

The tile sums, the contact tests and LK's segments loop over the used entries only, so the ratios to the first column
show what still scales with capacity. All capacities must give the same rows (checked: every output leaf,
NaN-equal). CPU time (all threads of this process), best of ``--reps``: for a single-thread reading set
``XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"``.

    python benchmarks/score_capacity_cost.py --k 16 --scenes 256
    python benchmarks/score_capacity_cost.py --k 1024 --scenes 4
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def main() -> None:
    from jaxdrive.malloc_tunables import reexec_with_malloc_tunables

    reexec_with_malloc_tunables()  # as ``jaxdrive score`` does
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=16, help="proposals per scene")
    ap.add_argument("--scenes", type=int, default=256, help="scenes per batch (default: 256)")
    ap.add_argument("--reps", type=int, default=5, help="timed steps per capacity; the best is printed (default: 5)")
    args = ap.parse_args()

    import jax
    import numpy as np
    from score_end_to_end import make_scenes

    from jaxdrive.broadphase.device import needs
    from jaxdrive.scene import batch_scenes
    from jaxdrive.scorer import capacity_for, default_capacity, score_with_overflow

    sc, pr, _ = batch_scenes(make_scenes(args.k, args.scenes, min(args.scenes, 16)), validate=False)
    need = needs(sc, pr, 1)
    default = default_capacity(args.k)
    covered = dataclasses.replace(default, **{f.name: max(getattr(default, f.name), getattr(capacity_for(need), f.name))
                                              for f in dataclasses.fields(default)})
    caps = {"needs x1.25": capacity_for(need), "needs x2": capacity_for(need, 2.0),
            "defaults" if covered == default else "defaults (raised to the needs)": covered}
    print(f"K = {args.k}, {args.scenes} scenes; needs per scene: {need}")
    args_dev = jax.device_put((sc, pr))
    fns, rows = {}, None
    for name, cap in caps.items():
        fns[name] = jax.jit(lambda s, p, cap=cap: score_with_overflow(s, p, capacity=cap, fallback=False))
        out, overflow = fns[name](*args_dev)
        assert not bool(overflow), name
        leaves = [np.asarray(x) for x in jax.tree.leaves(jax.device_get(out))]
        rows = rows or leaves
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(rows, leaves)), f"{name}: rows differ"
    best = {name: float("inf") for name in fns}
    for _ in range(args.reps):
        for name, fn in fns.items():
            c0 = time.process_time()
            jax.block_until_ready(fn(*args_dev))
            best[name] = min(best[name], time.process_time() - c0)
    base = best["needs x1.25"]
    for name in fns:
        print(f"{name:32s} {best[name] * 1e3:8.1f} CPU ms/step  {args.k * args.scenes / best[name]:9,.0f} "
              f"proposals/CPU-s  x{best[name] / base:.2f}")
    print("rows identical at every capacity")


if __name__ == "__main__":
    main()
