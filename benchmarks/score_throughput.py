"""EPDMS scoring throughput: jitted kernels (dense and with the exact broad phase) vs the per-proposal reference.

On identical synthetic scenes (``jaxdrive.data.synthetic``, padded to the job's default ``PadSpec``: K = 16, 32 agents,
24 areas x 96 vertices, 64 lanes x 96 vertices), it measures

* the jitted scorer on device-resident batches, after compile (compile time reported separately): the full EPDMS
  ``jaxdrive.rules.epdms.score`` when that module exists, otherwise ego areas + the map rules (DAC, DDC, TLC, LK, raw
  progress); once on the dense padded map and once on the broad phase's packed per-proposal map
  (``jaxdrive.broadphase.pack_batch``; its host time per batch is reported as its own column);
* the in-repo per-proposal reference (``tests/reference_rules.py``, plus ``tests/reference_collision.py``'s NC, TTC,
  HC and EC when the full scorer is measured), timed on a few scenes and extrapolated per proposal;

prints the ratio measured in this run, then a scaling table over proposals per scene K, agents N and batch B (time per
batch should grow linearly in B*K). Runs unchanged on CPU, GPU or TPU (whatever ``jax.devices()`` gives):

    python benchmarks/score_throughput.py            # full run (a few minutes on a 2-core CPU)
    python benchmarks/score_throughput.py --quick    # smaller scaling table
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from reference_rules import reference_rules  # noqa: E402

from jaxdrive.broadphase import PackSpec, pack_batch  # noqa: E402
from jaxdrive.data.synthetic import generate_scene  # noqa: E402
from jaxdrive.scene import PadSpec, batch_scenes  # noqa: E402

DEFAULT_PAD = dict(proposals=16, agents=32, areas=24, area_vertices=96, lanes=64, lane_vertices=96, centerline=512)
HAS_EPDMS = importlib.util.find_spec("jaxdrive.rules.epdms") is not None


def _map_rules(scene, states):
    from jaxdrive.rules.areas import ego_areas
    from jaxdrive.rules.dac import drivable_area_compliance
    from jaxdrive.rules.ddc import driving_direction_compliance
    from jaxdrive.rules.lk import lane_keeping
    from jaxdrive.rules.progress import raw_progress
    from jaxdrive.rules.tlc import traffic_light_compliance

    areas = ego_areas(scene.map, states)
    out = [fn(scene, states, areas) for fn in (drivable_area_compliance, driving_direction_compliance,
                                               traffic_light_compliance, lane_keeping)]
    return out + [raw_progress(scene, states, areas)]


def make_scorer():
    """(name, jitted fn(scene[B], proposals[B, K]))."""
    if HAS_EPDMS:
        from jaxdrive.rules.epdms import score

        return "full EPDMS (jaxdrive.rules.epdms.score)", jax.jit(lambda s, p: score(s, p))
    map_only = jax.jit(jax.vmap(lambda s, p: _map_rules(s, p.states)))
    return "ego areas + map rules (epdms.score not present yet)", map_only


def reference_per_proposal_s(scenes, full: bool) -> float:
    """Seconds per proposal of the slow references: map rules, plus NC, TTC, HC and EC when ``full``."""
    import reference_collision as rc

    t0 = time.perf_counter()
    n = 0
    for s in scenes:
        reference_rules(s)
        if full:
            for states in s.proposal_states:
                rc.nc_ref(s, states)
                rc.ttc_ref(s, states)
            from jaxdrive.scene import pad_history

            rc.history_comfort_ref(pad_history(s.history_states), s.proposal_states)
            if s.previous_states is not None:
                rc.extended_comfort_ref(s.proposal_states, s.previous_states)
        n += s.num_proposals
    return (time.perf_counter() - t0) / n


def timed(fn, args, reps: int) -> tuple[float, float]:
    """(compile + first run s, best steady-state s per call)."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return first, best


def build(scenes, pad: PadSpec, packed: bool, reps: int = 1):
    """Device batch (scene, proposals) and host seconds spent packing (best of ``reps``; 0 if dense)."""
    scene, props, _ = batch_scenes(scenes, pad, validate=False)
    host = 0.0
    if packed:
        host = float("inf")
        dense = scene
        for _ in range(reps):
            t0 = time.perf_counter()
            scene, _ = pack_batch(dense, props.states, PackSpec())
            host = min(host, time.perf_counter() - t0)
    return jax.device_put((scene, props)), host


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenes", type=int, default=16, help="scenes per batch (B) for the main comparison")
    ap.add_argument("--ref-scenes", type=int, default=3, help="scenes timed with the slow reference")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--skip-dense", action="store_true", help="skip the (slow on CPU) dense-map kernel run")
    ap.add_argument("--quick", action="store_true", help="smaller scaling table")
    args = ap.parse_args()

    name, scorer = make_scorer()
    print(f"device: {jax.devices()[0].platform} x{jax.device_count()} ({jax.devices()[0].device_kind}); "
          f"scorer: {name}")
    pad = PadSpec(**DEFAULT_PAD)
    scenes = [generate_scene(seed) for seed in range(args.scenes)]
    polys = [len(s.areas) + len(s.lanes) for s in scenes]
    print(f"scenes: {len(scenes)} x K={pad.proposals}, 41 steps, agents {np.mean([len(s.agents) for s in scenes]):.1f} "
          f"(pad {pad.agents}), map polygons mean {np.mean(polys):.1f} max {max(polys)} "
          f"(pad {pad.areas} areas + {pad.lanes} lanes x 96 vertices)")

    ref_s = reference_per_proposal_s(scenes[:args.ref_scenes], HAS_EPDMS)
    what = "reference_rules + reference_collision" if HAS_EPDMS else "reference_rules"
    print(f"\nreference (tests/{what}, shapely/numpy per proposal): {1 / ref_s:,.1f} proposals/s "
          f"({ref_s * 1e3:.1f} ms/proposal, {args.ref_scenes} scenes)")
    n_prop = len(scenes) * pad.proposals
    rows = []
    for packed in ([False, True] if not args.skip_dense else [True]):
        (scene, props), host = build(scenes, pad, packed, args.reps)
        first, best = timed(scorer, (scene, props), args.reps if packed else 1)
        rows.append(("packed (broad phase)" if packed else "dense padded map", first, best, host))
    print(f"\n{'kernels':<22} {'compile+1st s':>13} {'batch ms':>9} {'prop/s':>10} {'x reference':>12} "
          f"{'host pack ms':>13} {'prop/s incl. pack':>18}")
    for label, first, best, host in rows:
        pps = n_prop / best
        incl = n_prop / (best + host)
        print(f"{label:<22} {first:>13.1f} {best * 1e3:>9.1f} {pps:>10,.0f} {pps * ref_s:>12,.1f} "
              f"{host * 1e3:>13.1f} {incl:>18,.0f}")

    print("\nscaling (packed, steady state; linear scaling = constant us/proposal):")
    print(f"{'B':>4} {'K':>4} {'N':>4} {'compile s':>10} {'batch ms':>10} {'prop/s':>10} {'us/prop':>8}")
    ks, ns, bs = ((4, 16), (8, 32), (4, 8, 16)) if args.quick else ((4, 8, 16, 32), (8, 32, 64), (4, 8, 16, 32))
    configs = [(max(bs) // 2, k, 32) for k in ks] + [(max(bs) // 2, 16, n) for n in ns if n != 32] + \
              [(b, 16, 32) for b in bs]
    cache = {}
    for b, k, n in dict.fromkeys(configs):
        key = (b, k)
        if key not in cache:
            cache[key] = [generate_scene(seed, num_proposals=k) for seed in range(b)]
        spec = PadSpec(**{**DEFAULT_PAD, "proposals": k, "agents": n})
        (scene, props), _ = build(cache[key], spec, packed=True)
        first, best = timed(scorer, (scene, props), args.reps)
        print(f"{b:>4} {k:>4} {n:>4} {first:>10.1f} {best * 1e3:>10.1f} {b * k / best:>10,.0f} "
              f"{best / (b * k) * 1e6:>8.0f}")


if __name__ == "__main__":
    main()
