"""DriveJudge data generation: the EPDMS scoring and BEV rendering of ``jaxdrive judge data``, before and after, in one
process, on the same batches (8 synthetic judge scenes x 32 proposals, 32 images each, as ``build_dataset`` does).

* scoring: unculled ``epdms.score`` (before) vs ``BatchScorer`` (``jaxdrive.score``'s broad phase);
* rendering: every pixel against every map element, vmapped over the batch (before; ``jax.vmap(render_bev)``) vs
  ``render_bev_batch`` (8 x 8 pixel tiles against the elements near them, trimmed padding, one image at a time).

Checks that both give the same values / pixels, then prints CPU seconds per batch (median over the batches, after
one warm-up pass that compiles every shape) and the ratios. CPU time, so the figures hold on a shared machine::

    python benchmarks/judge_data_speed.py [--batches 8] [--size 64]
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jaxdrive.data.synthetic import generate_scene, pad_spec  # noqa: E402
from jaxdrive.judge import bev, synthetic  # noqa: E402
from jaxdrive.rules import epdms  # noqa: E402
from jaxdrive.scene import batch_scenes  # noqa: E402
from jaxdrive.scorer import BatchScorer  # noqa: E402


@functools.partial(jax.jit, static_argnums=(2,))
def render_before(scene, trajectories, cfg):
    return jax.vmap(bev.render_bev, in_axes=(0, 0, None))(scene, trajectories, cfg)


def cpu_s(f):
    t = time.process_time()
    out = jax.block_until_ready(f())
    return out, time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=8, help="batches of 8 scenes timed (the median is printed; "
                    "default: 8)")
    ap.add_argument("--size", type=int, default=64, help="image pixels per side (judge data default: 64)")
    args = ap.parse_args()
    cfg, spec, per_scene = bev.BevConfig(size=args.size), pad_spec(synthetic.NUM_PROPOSALS), 4
    rows, ks = np.repeat(np.arange(8), per_scene), np.tile(np.arange(per_scene), 8)
    batches = []
    for i in range(args.batches):
        scenes = [generate_scene(s, num_proposals=synthetic.NUM_PROPOSALS, profile=synthetic.PROFILE)
                  for s in range(900_000 + 8 * i, 900_008 + 8 * i)]
        batches.append(batch_scenes(scenes, spec)[:2])
    unculled, scorer = jax.jit(epdms.score), BatchScorer()
    times = {k: [] for k in ("score before", "score after", "render before", "render after")}
    for rep in range(2):  # the first pass compiles every shape
        for sc, pr in batches:
            want, t1 = cpu_s(lambda: jax.device_get(unculled(sc, pr)))
            got, t2 = cpu_s(lambda: scorer(sc, pr))
            for f in epdms.METRICS + ("epdms",):
                np.testing.assert_array_equal(np.asarray(getattr(got, f)), np.asarray(getattr(want, f)), err_msg=f)
            scene, traj = jax.tree.map(lambda x: x[rows], sc), pr.states[rows, ks]
            a, t3 = cpu_s(lambda: np.asarray(render_before(scene, traj, cfg)))
            b, t4 = cpu_s(lambda: np.asarray(bev.render_bev_batch(scene, traj, cfg)))
            np.testing.assert_array_equal(a, b)
            if rep:
                for k, t in zip(times, (t1, t2, t3, t4)):
                    times[k].append(t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(f"load average {os.getloadavg()[0]:.1f}; {args.batches} batches of 8 scenes x {synthetic.NUM_PROPOSALS} "
          f"proposals, {len(rows)} images of {args.size} px each; values and pixels identical")
    for k, v in med.items():
        print(f"  {k:14s} {v:7.3f} CPU s per batch (median)")
    print(f"  scoring {med['score before'] / med['score after']:.1f}x, rendering "
          f"{med['render before'] / med['render after']:.1f}x, both "
          f"{(med['score before'] + med['render before']) / (med['score after'] + med['render after']):.1f}x")


if __name__ == "__main__":
    main()
