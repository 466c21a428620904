"""EPDMS scoring throughput: the jitted scorer (dense and with the exact broad phase) vs the per-proposal reference.

On identical synthetic scenes (``jaxdrive.data.synthetic``, by default its "reference" profile: 41 steps, ~32 agents,
~57 map polygons; padded to the job's default ``PadSpec``: K = 16, 32 agents, 24 areas x 96 vertices, 64 lanes x 96
vertices), it measures

* the host-packed scorer ``jaxdrive score`` ran before issue 12 (``job_scorer``: the map predicates over the broad
  phase's edge tiles, then NC / TTC over its contact triples, every other rule and the EPDMS aggregation) on
  device-resident batches, after compile (compile time reported separately), with the broad phase's host time per
  batch as its own column; also the same full EPDMS as one fused jitted program (``jax.jit(jaxdrive.rules.epdms.
  score)``) on the packed batch and on the dense padded batch (no broad phase);
* the in-repo per-proposal reference (``tests/reference_rules.py`` + ``tests/reference_collision.py``: shapely/numpy
  map rules, NC, TTC, HC and EC), timed on a few scenes and extrapolated per proposal;

prints the ratio measured in this run, then a scaling table over proposals per scene K, agents N and batch B, and the
least-squares line batch time = fixed + per-proposal x B*K over the N = 32 rows (linear scaling: the line fits). Runs unchanged on CPU, GPU or TPU (whatever
``jax.devices()`` gives; the batch is sharded over all local devices):

    python benchmarks/score_throughput.py            # full run (a few minutes on a 2-core CPU)
    python benchmarks/score_throughput.py --quick    # smaller scaling table
    python benchmarks/score_throughput.py --rules    # plus the cost of each rule group alone
"""
from __future__ import annotations

import argparse
import dataclasses
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
from jaxdrive.data.synthetic import PROFILES, generate_scene  # noqa: E402
from jaxdrive.rules.epdms import score  # noqa: E402
from jaxdrive.scene import PadSpec, batch_scenes  # noqa: E402
from jaxdrive.scoring.runner import make_mesh  # noqa: E402

DEFAULT_PAD = dict(proposals=16, agents=32, areas=24, area_vertices=96, lanes=64, lane_vertices=96, centerline=512)


def job_scorer():
    """The host-packed step (the runner's until the broad phase moved on device; benchmarks/score_end_to_end.py
    compares the two): map predicates over the host-packed edge tiles, then every rule, as two jitted programs on
    all local devices: fn(packed scene[B], proposals[B, K]) -> SubScores."""
    from jax.sharding import NamedSharding, PartitionSpec

    from jaxdrive.rules.areas import batch_ego_areas

    data = NamedSharding(make_mesh(), PartitionSpec("data"))
    areas_fn = jax.jit(lambda sc, pr: batch_ego_areas(sc.map, pr.states), in_shardings=(data, data),
                       out_shardings=data)
    rules_fn = jax.jit(lambda sc, pr, ar: score(sc, pr, areas=ar), in_shardings=(data,) * 3, out_shardings=data)
    return lambda scene, props: rules_fn(scene, props, areas_fn(scene, props))


def reference_per_proposal_s(scenes) -> float:
    """Seconds per proposal of the slow references: map rules, NC, TTC, HC and EC."""
    import reference_collision as rc

    from jaxdrive.scene import pad_history

    t0 = time.perf_counter()
    n = 0
    for s in scenes:
        reference_rules(s)
        for states in s.proposal_states:
            rc.nc_ref(s, states)
            rc.ttc_ref(s, states)
        rc.history_comfort_ref(pad_history(s.history_states), s.proposal_states)
        if s.previous_states is not None:
            rc.extended_comfort_ref(s.proposal_states, s.previous_states)
        n += s.num_proposals
    return (time.perf_counter() - t0) / n


def timed(fn, args, reps: int, warmup: int = 2) -> tuple[float, float]:
    """(compile + first run s, best steady-state s per call over ``reps`` calls after ``warmup`` untimed ones)."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return first, best


def build(scenes, pad: PadSpec, packed: bool, reps: int = 1):
    """Host batch (scene, proposals) and host seconds spent packing (best of ``reps``; 0 if dense)."""
    scene, props, _ = batch_scenes(scenes, pad, validate=False)
    host = 0.0
    if packed:
        host = float("inf")
        dense = scene
        for _ in range(reps):
            t0 = time.perf_counter()
            scene, _ = pack_batch(dense, props.states, PackSpec(), groups=jax.device_count())
            host = min(host, time.perf_counter() - t0)
    return (scene, props), host


def rule_costs(batch, reps: int) -> list[tuple[str, float]]:
    """Steady-state seconds per call of each rule group jitted alone on a device-resident packed batch."""
    from jaxdrive.rules.areas import batch_ego_areas
    from jaxdrive.rules.comfort import comfort_v1, extended_comfort, history_comfort
    from jaxdrive.rules.lk import lane_keeping
    from jaxdrive.rules.nc import batch_no_at_fault_collisions
    from jaxdrive.rules.progress import raw_progress
    from jaxdrive.rules.ttc import batch_time_to_collision

    scene, props = jax.device_put(batch)
    areas = jax.jit(lambda s, p: batch_ego_areas(s.map, p.states))(scene, props)
    per_scene = lambda fn: jax.jit(jax.vmap(lambda s, p, a: fn(s.replace(agents=None), p, a)))
    groups = [
        ("map predicates + TLC (batch_ego_areas)", jax.jit(lambda s, p, a: batch_ego_areas(s.map, p.states))),
        ("NC", jax.jit(lambda s, p, a: batch_no_at_fault_collisions(s, p.states, a))),
        ("TTC", jax.jit(lambda s, p, a: batch_time_to_collision(s, p.states, a))),
        ("LK", per_scene(lambda s, p, a: lane_keeping(s, p.states, a))),
        ("progress", per_scene(lambda s, p, a: raw_progress(s, p.states, a))),
        ("HC + EC + v1 comfort (float64)", per_scene(lambda s, p, a: (
            history_comfort(s.history_padded, p.states), extended_comfort(p.states, p.previous, p.has_previous),
            comfort_v1(p.states)))),
    ]
    return [(name, timed(fn, (scene, props, areas), reps)[1]) for name, fn in groups]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenes", type=int, default=16, help="scenes per batch (B) for the main comparison")
    ap.add_argument("--ref-scenes", type=int, default=3, help="scenes timed with the slow reference")
    ap.add_argument("--reps", type=int, default=5, help="timed calls per configuration (the best is reported)")
    ap.add_argument("--skip-dense", action="store_true", help="skip the (slow on CPU) dense run without the broad phase")
    ap.add_argument("--quick", action="store_true", help="smaller scaling table")
    ap.add_argument("--profile", default="reference", help="synthetic scene profile (default: the reference mix)")
    ap.add_argument("--rules", action="store_true", help="also time each rule group alone (us/proposal)")
    args = ap.parse_args()

    scorer = job_scorer()
    fused = jax.jit(score)
    print(f"device: {jax.devices()[0].platform} x{jax.device_count()} ({jax.devices()[0].device_kind}); "
          f"scorer: full EPDMS")
    pad = PadSpec(**DEFAULT_PAD)
    scenes = [generate_scene(seed, profile=args.profile) for seed in range(args.scenes)]
    polys = [len(s.areas) + len(s.lanes) for s in scenes]
    agents = np.mean([len(s.agents) for s in scenes])
    print(f"scenes ({args.profile}): {len(scenes)} x K={pad.proposals}, 41 steps, agents {agents:.1f} "
          f"(pad {pad.agents}), map polygons mean {np.mean(polys):.1f} max {max(polys)} "
          f"(pad {pad.areas} areas + {pad.lanes} lanes x 96 vertices)")

    ref_s = reference_per_proposal_s(scenes[:args.ref_scenes])
    print(f"\nreference (tests/reference_rules + reference_collision, shapely/numpy per proposal): {1 / ref_s:,.1f} "
          f"proposals/s ({ref_s * 1e3:.1f} ms/proposal, {args.ref_scenes} scenes)")
    n_prop = len(scenes) * pad.proposals
    (packed_batch, host) = build(scenes, pad, True, args.reps)
    runs = [("jaxdrive score step", scorer, packed_batch, host, args.reps),
            ("one fused jit, packed", fused, packed_batch, host, args.reps)]
    if not args.skip_dense:
        runs.append(("fused, dense (no culling)", fused, build(scenes, pad, False)[0], 0.0, 1))
    print(f"\n{'scorer':<24} {'compile+1st s':>13} {'batch ms':>9} {'prop/s':>10} {'x reference':>12} "
          f"{'host pack ms':>13} {'prop/s incl. pack':>18}")
    for label, fn, batch, host_s, reps in runs:
        first, best = timed(fn, jax.device_put(batch), reps)
        pps = n_prop / best
        print(f"{label:<24} {first:>13.1f} {best * 1e3:>9.1f} {pps:>10,.0f} {pps * ref_s:>12,.1f} "
              f"{host_s * 1e3:>13.1f} {n_prop / (best + host_s):>18,.0f}")

    if args.rules:
        print("\nper rule group, jitted alone (packed batch above):")
        for name, sec in rule_costs(packed_batch, max(args.reps, 5)):
            print(f"  {name:<40} {sec * 1e3:>8.2f} ms/batch {sec / n_prop * 1e6:>8.1f} us/proposal")

    print("\nscaling (jaxdrive score step, steady state; N = mean agents per scene; linear scaling = constant "
          "us/proposal):")
    print(f"{'B':>4} {'K':>4} {'N':>4} {'compile s':>10} {'batch ms':>10} {'prop/s':>10} {'us/prop':>8}")
    ks, ns, bs = ((4, 16), (8, 32), (4, 8, 16)) if args.quick else ((4, 8, 16, 32), (8, 32, 64), (4, 8, 16, 32))
    configs = [(max(bs) // 2, k, 32) for k in ks] + [(max(bs) // 2, 16, n) for n in ns if n != 32] + \
              [(b, 16, 32) for b in bs]
    line = []
    for b, k, n in dict.fromkeys(configs):
        # N agents: the profile with at most N agents (its background traffic scaled to fill them)
        base = PROFILES[args.profile]
        prof = dataclasses.replace(base, max_agents=n, background_vehicles=2 * n if base.background_vehicles else 0)
        scenes_bkn = [generate_scene(seed, num_proposals=k, profile=prof) for seed in range(b)]
        spec = PadSpec(**{**DEFAULT_PAD, "proposals": k, "agents": n})
        batch, _ = build(scenes_bkn, spec, packed=True)
        first, best = timed(scorer, jax.device_put(batch), args.reps)
        n_mean = np.mean([len(s.agents) for s in scenes_bkn])
        print(f"{b:>4} {k:>4} {n_mean:>4.0f} {first:>10.1f} {best * 1e3:>10.1f} {b * k / best:>10,.0f} "
              f"{best / (b * k) * 1e6:>8.0f}")
        if n == 32:
            line.append((b * k, best))
    x, y = np.array(line, float).T
    slope, fixed = np.polyfit(x, y, 1)
    worst = np.max(np.abs(fixed + slope * x - y) / y)
    print(f"\nlinear fit over the N = 32 rows: batch time = {fixed * 1e3:.2f} ms + {slope * 1e6:.1f} us x B*K "
          f"(largest deviation {worst:.0%}); asymptotic {1 / slope:,.0f} proposals/s")


if __name__ == "__main__":
    main()
