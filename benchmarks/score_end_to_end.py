"""EPDMS scoring end to end (read -> parquet) and step-only, against the in-repo shapely reference in the same run.

For each K (proposals per scene) it builds synthetic scenes of the reference mix (``jaxdrive.data.synthetic``,
profile "reference": ~32 agents, ~57 map polygons; the generator makes up to 31 distinct proposals, so larger K
tile them with lateral offsets of up to +-2 m, like a trajectory vocabulary), writes them once as a scene store and
as JSON files (not timed), then measures

* ``store``: ``jaxdrive score`` on the store (``score_source``: read, pad, device_put, the jitted scorer with the
  broad phase inside, parquet shards): wall time of the whole run, compile time, throughput after the first batch,
  number of compiles and of batches that overflowed the capacities (scored unculled inside the program);
* ``json``: the same from the JSON files (``--workers`` reader processes);
* ``--passes 2``: each of those end-to-end runs again in the same process (rows ``e2e#2``): the first pass grows the
  process's heap to the program's working set (the ``faults`` column: minor page faults of the run, in thousands; on
  a VM each fresh page can cost ~10 us), later passes reuse it, as the rest of a long run does;
* ``step``: the jitted scorer alone on a device-resident batch (best of ``--reps``); ``step@run all``: the same
  program looping over every batch of the end-to-end run (device-resident; the end-to-end rate's ceiling, since
  batches differ in cost); and, for K <= 256, the host-
  packed path the runner used before (numpy broad phase per batch + the two-program step;
  ``benchmarks/score_throughput.py``) with its packing time included, to show where, if anywhere, it still wins;
* the reference: ``tests/reference_rules.py`` + ``tests/reference_collision.py`` (shapely/numpy, per proposal) on a
  few scenes; every throughput is also printed as a ratio to it;

and the 61 NAVSIM fixtures replicated ``--replicas`` times from a store: compiles after the first batch (target 0).
The machine's load average is printed first: on a shared CPU, figures scale with the cores actually free.
Runs unchanged on CPU, GPU or TPU (batches are sharded over all local devices)::

    python benchmarks/score_end_to_end.py                      # K in 1, 16, 256, 1024, 4096
    python benchmarks/score_end_to_end.py --ks 16 --quick      # one small row
    python benchmarks/score_end_to_end.py --ks 4096 --step-only --step-proposals 65536,262144 --parts   # a GPU's step
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import itertools
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACED_STEPS = 3  # runs of the step program in a --trace
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from jaxdrive.broadphase.device import needs  # noqa: E402
from jaxdrive.data.scene_json import read_scene, write_scene  # noqa: E402
from jaxdrive.data.store import write_store  # noqa: E402
from jaxdrive.data.synthetic import generate_scene  # noqa: E402
from jaxdrive.scene import PadSpec, batch_scenes  # noqa: E402
from jaxdrive.scorer import capacity_for, score_with_overflow  # noqa: E402
from jaxdrive.scoring.runner import ScoreOptions, score_source  # noqa: E402
from jaxdrive.scoring.sources import SceneDirSource, SceneStoreSource  # noqa: E402


def widen(scene, k: int):
    """``scene`` with exactly ``k`` proposals: its own, tiled with lateral offsets (m) when k exceeds them."""
    n = scene.num_proposals
    idx = np.arange(k) % n
    offset = np.where(np.arange(k) < n, 0.0, np.linspace(-2.0, 2.0, k))[:, None]
    h0 = scene.history_states[-1, 2]
    normal = np.array([-np.sin(h0), np.cos(h0)])

    def shift(states):
        out = states[idx].copy()
        out[..., :2] += offset[:, None, :] * normal  # [k, 1, 2] over the steps
        return out

    return dataclasses.replace(
        scene, proposal_states=shift(scene.proposal_states),
        previous_states=None if scene.previous_states is None else shift(scene.previous_states),
        previous_kinds=None if scene.previous_kinds is None else [scene.previous_kinds[i] for i in idx],
        proposal_names=[f"{scene.proposal_names[i]}~{j}" for j, i in enumerate(idx)],
        proposal_families=[scene.proposal_families[i] for i in idx])


def make_scenes(k: int, count: int, distinct: int):
    """``count`` scenes of ``k`` proposals: ``distinct`` generated ones, repeated under new ids."""
    base = [widen(generate_scene(seed, num_proposals=min(k, 31), profile="reference"), k) for seed in range(distinct)]
    return [dataclasses.replace(base[i % distinct], id=f"{base[i % distinct].id}-r{i}") for i in range(count)]


def reference_per_proposal_s(scenes) -> float:
    from score_throughput import reference_per_proposal_s as ref

    return ref(scenes)


def end_to_end(source, out, options) -> tuple[float, object]:
    t0, c0, f0 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    stats = score_source(source, out, options, progress=False)
    stats.cpu_s = time.process_time() - c0  # every thread of this process (reader workers not included)
    stats.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    return time.perf_counter() - t0, stats


def device_batch(scenes, pad, batch: int):
    """A padded batch of ``batch`` rows as the runner builds it: ``scenes`` then filler rows without valid proposals
    (capacities are per row of the batch, so a batch of fewer rows would overflow the run's)."""
    sc, pr, _ = batch_scenes(scenes + [scenes[0]] * (batch - len(scenes)), pad, validate=False)
    return sc, pr.replace(valid=pr.valid & (np.arange(batch) < len(scenes))[:, None])


def culled_step(capacity):
    """The runner's program without its sharding: the culled scorer at ``capacity`` over all local devices' groups,
    no unculled fallback; (scene, proposals) -> (SubScores, overflow)."""
    groups = jax.device_count()
    return jax.jit(lambda s, p: score_with_overflow(s, p, capacity=capacity, groups=groups, fallback=False))


def timed(fn, args, reps: int):
    """Best wall and CPU seconds of ``fn(*args)`` over ``reps`` calls after a first one (returned: its seconds, the
    compile included) and the first call's output."""
    t0 = time.perf_counter()
    first_out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    best = best_cpu = float("inf")
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(*args))
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
    return best, first, best_cpu, first_out


def step_only(scenes, pad, batch: int, reps: int, capacity=None, trace: str | None = None):
    """Seconds per batch of the jitted scorer on a device-resident batch (best of ``reps``), and its compile; at the
    batch's own capacities, or at ``capacity`` (e.g. those the end-to-end run fixed from all its batches). ``trace``:
    a folder for a ``jax.profiler`` trace of three more steps and the program's optimized HLO (``step_hlo.txt``):
    ``benchmarks/kernel_sources.py`` names the source lines of the costliest kernels from the two."""
    sc, pr = device_batch(scenes[:batch], pad, batch)
    args = jax.device_put((sc, pr))
    t0 = time.perf_counter()
    fn = culled_step(capacity or capacity_for(needs(sc, pr, jax.device_count()))).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    best, first, best_cpu, (_, overflow) = timed(fn, args, reps)
    if trace:
        with jax.profiler.trace(trace):
            for _ in range(TRACED_STEPS):
                jax.block_until_ready(fn(*args))
        Path(trace, "step_hlo.txt").write_text(fn.as_text())
    return best, compile_s + first, bool(overflow), best_cpu


def step_parts(scenes, pad, batch: int, reps: int):
    """Yield (name, seconds per batch (best of ``reps``), compile seconds, None) for each of the step's parts, each
    its own program on device-resident inputs, as it is measured: the broad phase (``pack_on_device`` at the batch's
    capacities); on its packed scene the map predicates (``batch_ego_areas``), NC's and TTC's contact kernels and all
    the rules together (``epdms.score``: those three plus DDC, TLC, EP, LK, comfort and the aggregation); and the
    rules on the unculled scene (no broad phase: every proposal against every polygon, lane and agent). A part the
    device cannot run (e.g. the unculled rules out of memory) yields (name, None, None, the error's first line);
    the parts that need its output are then skipped. Says where the step's time goes, and whether culling pays on
    this device."""
    from jaxdrive.broadphase.device import pack_on_device
    from jaxdrive.rules import epdms

    sc, pr = device_batch(scenes[:batch], pad, batch)
    groups = jax.device_count()
    capacity = capacity_for(needs(sc, pr, groups))
    sc, pr = jax.device_put((sc, pr))
    out = {}

    def part(name, fn, args, runs):
        try:
            best, first, _, out[name] = timed(jax.jit(fn), args, runs)
        except jax.errors.JaxRuntimeError as e:
            return name, None, None, str(e).splitlines()[0][:120]
        return name, best, first, None

    yield part("broad phase", lambda s, p: pack_on_device(s, p, capacity, groups), (sc, pr), reps)
    if "broad phase" in out:
        packed = out["broad phase"][0]
        yield part("map areas", lambda s, x: epdms.batch_ego_areas(s.map, x), (packed, pr.states), reps)
        if "map areas" in out:
            yield part("nc", epdms.batch_no_at_fault_collisions, (packed, pr.states, out["map areas"]), reps)
            yield part("ttc", epdms.batch_time_to_collision, (packed, pr.states, out["map areas"]), reps)
        yield part("rules", lambda s, p: epdms.score(s, p), (packed, pr), reps)
    yield part("unculled", lambda s, p: epdms.score(s, p), (sc, pr), 1)  # ~100x slower: one rep


def step_all(scenes, pad, batch: int, capacity, passes: int = 2):
    """Seconds and CPU seconds of one pass of the jitted scorer looping back to back over every batch of the run
    (device-resident, at the run's capacities; best of ``passes``), and whether any batch overflowed: the end-to-end
    rate's ceiling, what is left when reading, padding and writing cost nothing. Batches differ in cost (tiles, red
    lanes, contact triples), so this, not ``step``'s one batch, is the figure to compare the end-to-end rate with."""
    fn = culled_step(capacity)
    args = [jax.device_put(device_batch(scenes[i:i + batch], pad, batch)) for i in range(0, len(scenes), batch)]
    overflow = bool(jax.block_until_ready(fn(*args[0]))[1])
    best = best_cpu = float("inf")
    for _ in range(passes):
        t0, c0 = time.perf_counter(), time.process_time()
        for a in args:
            out, over = fn(*a)
            overflow |= bool(over)
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
    return best, best_cpu, overflow


def host_packed(scenes, pad, batch: int, reps: int):
    """Seconds per batch of the host-packed path (numpy packing + the two-program step), packing included."""
    from score_throughput import job_scorer

    from jaxdrive.broadphase import PackSpec, pack_batch

    sc, pr, _ = batch_scenes(scenes[:batch], pad, validate=False)
    step = job_scorer()
    best = float("inf")
    for i in range(reps + 1):
        t0 = time.perf_counter()
        packed, _ = pack_batch(sc, pr.states, PackSpec(), groups=jax.device_count())
        jax.block_until_ready(step(*jax.device_put((packed, pr))))
        if i:  # the first call compiles
            best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    from jaxdrive.malloc_tunables import reexec_with_malloc_tunables

    reexec_with_malloc_tunables()  # as ``jaxdrive score`` does (JAXDRIVE_MALLOC_TUNABLES=0: measure without)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ks", default="1,16,256,1024,4096", help="proposals per scene, comma-separated")
    ap.add_argument("--proposals", type=int, default=8192, help="proposals per end-to-end run (per K)")
    ap.add_argument("--batch-proposals", type=int, default=4096, help="scenes per batch = this / K (at least 1)")
    ap.add_argument("--distinct", type=int, default=16, help="distinct generated scenes per K (then repeated)")
    ap.add_argument("--workers", type=int, default=1, help="reader processes of the end-to-end runs")
    ap.add_argument("--reps", type=int, default=3, help="timed steps per step row; the best is printed (default: 3)")
    ap.add_argument("--ref-scenes", type=int, default=2, help="scenes (K = 16) timed with the shapely reference")
    ap.add_argument("--replicas", type=int, default=20, help="fixture replicas of the recompile check (0: skip)")
    ap.add_argument("--skip-json", action="store_true", help="skip the end-to-end runs from JSON scene files")
    ap.add_argument("--passes", type=int, default=1, help="end-to-end runs per path in this process (later: e2e#N)")
    ap.add_argument("--quick", action="store_true", help="fewer proposals per run")
    ap.add_argument("--step-only", action="store_true",
                    help="no store, JSON or end-to-end runs: only the step rows (an accelerator's figure)")
    ap.add_argument("--step-proposals", default="",
                    help="comma-separated proposals per batch of the step rows (default: --batch-proposals); with "
                         "--step-only, e.g. 131072,1048576 on a GPU")
    ap.add_argument("--trace", default="", help="folder for a jax.profiler trace of three steps at the first "
                    "--step-proposals of the first K, and the program's optimized HLO (DIR/step_hlo.txt): "
                    "benchmarks/kernel_sources.py names the costly kernels' source lines from the two")
    ap.add_argument("--parts", action="store_true",
                    help="also time the step's parts, each its own program, at the first --step-proposals: the "
                         "broad phase, the map predicates, NC, TTC, all the rules on the packed scene, and the rules "
                         "on the unculled scene")
    ap.add_argument("--accelerator-trips", type=int, default=0,
                    help="off the CPU, the most steps a broad-phase loop takes (jaxdrive.broadphase.blocks."
                         "ACCELERATOR_TRIPS; 0: its default) — to compare settings on a GPU")
    args = ap.parse_args()
    if args.accelerator_trips < 0:
        ap.error(f"--accelerator-trips: expected 0 (the default) or a positive number of steps, "
                 f"got {args.accelerator_trips}")
    from jaxdrive.broadphase import blocks, segments

    if args.accelerator_trips:
        blocks.ACCELERATOR_TRIPS = args.accelerator_trips  # read when the programs are traced, below
    if args.quick:
        args.proposals, args.reps = 2048, 2

    from jaxdrive import xla_cache

    xla_cache.enable()  # as `jaxdrive score` does: a program compiled by an earlier run is reused
    ndev = jax.device_count()
    load = os.getloadavg()
    trips = "" if blocks.on_cpu() else f"; broad-phase loops of at most {blocks.ACCELERATOR_TRIPS} steps"
    trips += f"; segment reductions by {segments.implementation()}"
    print(f"device: {jax.devices()[0].platform} x{ndev} ({jax.devices()[0].device_kind}); cpu cores "
          f"{os.cpu_count()}; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}{trips}")
    ref_s = reference_per_proposal_s(make_scenes(16, args.ref_scenes, args.ref_scenes))
    print(f"reference (shapely/numpy per proposal): {1 / ref_s:,.1f} proposals/s ({ref_s * 1e3:.1f} ms/proposal)\n")
    tmp = tempfile.mkdtemp(prefix="jaxdrive-e2e-")
    header = (f"{'K':>5} {'path':<12} {'scenes':>6} {'proposals':>9} {'wall s':>7} {'compile s':>9} {'prop/s':>10} "
              f"{'after compile':>13} {'excl compile':>12} {'x ref':>8} {'compiles':>8} {'overflows':>9} {'cpu s':>6} {'prop/cpu-s':>10} "
              f"{'faults':>7}")
    rows = []
    print(header, flush=True)
    try:
        for k in [int(x) for x in args.ks.split(",")]:
            scenes_per_batch = lambda proposals: max(ndev, -(-max(1, proposals // k) // ndev) * ndev)
            batch = scenes_per_batch(args.batch_proposals)
            count = max(1, args.proposals // k)
            step_batches = ([scenes_per_batch(int(p)) for p in args.step_proposals.split(",") if p]
                            or [min(batch, count)])
            total = max(count, *step_batches)
            step_scenes = make_scenes(k, total, min(args.distinct, total))
            scenes = step_scenes[:count]  # those of the end-to-end runs
            step_pad, pad, paths = PadSpec.fit(step_scenes), PadSpec.fit(scenes), []
            if not args.step_only:
                store = os.path.join(tmp, f"store-{k}")
                write_store(scenes, store)
                source = SceneStoreSource(store)
                pad = source.pad_spec()
                paths.append(("store", source))
            options = ScoreOptions(batch_size=batch, shard_size=max(batch, 4096), workers=args.workers, pad=pad)
            if not (args.skip_json or args.step_only):
                json_dir = os.path.join(tmp, f"json-{k}")
                os.makedirs(json_dir)
                for s in scenes:
                    write_scene(s, os.path.join(json_dir, f"{s.id}.json"))
                paths.append(("json", SceneDirSource(json_dir)))
            run_capacity = None
            for (name, src), run in itertools.product(paths, range(args.passes)):
                wall, stats = end_to_end(src, os.path.join(tmp, f"out-{name}-{k}-{run}"), options)
                run_capacity = run_capacity or stats.capacity
                n = stats.proposals
                label = f"{name} e2e" + (f"#{run + 1}" if run else "")
                rows.append(f"{k:>5} {label:<12} {count:>6} {n:>9} {wall:>7.1f} {stats.compile_s:>9.1f} "
                            f"{n / wall:>10,.0f} {stats.proposals_per_s:>13,.0f} {n / (wall - stats.compile_s):>12,.0f} "
                            f"{n / wall * ref_s:>8,.0f} "
                            f"{stats.compiles:>8} {stats.overflow_batches:>9} {stats.cpu_s:>6.1f} "
                            f"{stats.scored_after_compile / stats.score_cpu_s if stats.score_cpu_s else float('nan'):>10,.0f} "
                            f"{stats.faults / 1e3:>7,.0f}")
                print(rows[-1], flush=True)
            for b in step_batches:
                trace, args.trace = args.trace, ""  # the first step row only
                try:
                    best, first, overflow, best_cpu = step_only(step_scenes, step_pad, b, args.reps, trace=trace)
                except jax.errors.JaxRuntimeError as e:  # e.g. a batch larger than the device's memory
                    rows.append(f"{k:>5} {'step':<12} {b:>6} {b * k:>9} failed: {str(e).splitlines()[0][:120]}")
                    print(rows[-1], flush=True)
                    continue
                n = b * k
                rows.append(f"{k:>5} {'step':<12} {b:>6} {n:>9} {best:>7.3f} {first:>9.1f} "
                            f"{n / best:>10,.0f} {'':>13} {'':>12} {n / best * ref_s:>8,.0f} {'':>8} {int(overflow):>9} "
                            f"{'':>6} {n / best_cpu:>10,.0f}")
                print(rows[-1], flush=True)
            if args.parts:
                b = step_batches[0]
                for name, best, first, error in step_parts(step_scenes, step_pad, b, args.reps):
                    rows.append(f"{k:>5} {name:<12} {b:>6} {b * k:>9} failed: {error}" if error else
                                f"{k:>5} {name:<12} {b:>6} {b * k:>9} {best:>7.3f} {first:>9.1f} "
                                f"{b * k / best:>10,.0f} {'':>13} {'':>12} {b * k / best * ref_s:>8,.0f}")
                    print(rows[-1], flush=True)
            n = min(batch, count) * k
            if run_capacity is not None and run_capacity != capacity_for(needs(*device_batch(
                    scenes[:batch], options.pad, batch), jax.device_count())):
                best, first, overflow, best_cpu = step_only(scenes, options.pad, batch, args.reps, run_capacity)
                rows.append(f"{k:>5} {'step@run':<12} {min(batch, count):>6} {n:>9} {best:>7.3f} {first:>9.1f} "
                            f"{n / best:>10,.0f} {'':>13} {'':>12} {n / best * ref_s:>8,.0f} {'':>8} {int(overflow):>9} "
                            f"{'':>6} {n / best_cpu:>10,.0f}")
                print(rows[-1], flush=True)
            if run_capacity is not None:
                wall, cpu, overflow = step_all(scenes, options.pad, batch, run_capacity)
                rows.append(f"{k:>5} {'step@run all':<12} {count:>6} {count * k:>9} {wall:>7.3f} {'':>9} "
                            f"{count * k / wall:>10,.0f} {'':>13} {'':>12} {count * k / wall * ref_s:>8,.0f} {'':>8} "
                            f"{int(overflow):>9} {cpu:>6.1f} {count * k / cpu:>10,.0f}")
                print(rows[-1], flush=True)
            if k <= 256:
                host = host_packed(scenes, options.pad, batch, args.reps)
                rows.append(f"{k:>5} {'host-packed':<12} {min(batch, count):>6} {n:>9} {host:>7.3f} {'':>9} "
                            f"{n / host:>10,.0f} {'':>13} {'':>12} {n / host * ref_s:>8,.0f}")
                print(rows[-1], flush=True)
        if args.replicas:
            from conftest import EPDMS_FIXTURES

            files = sorted(glob.glob(f"{EPDMS_FIXTURES}/*.json")) + sorted(glob.glob(f"{EPDMS_FIXTURES}/sanity/*.json"))
            fixtures = [read_scene(f) for f in files]
            store = os.path.join(tmp, "fixtures")
            write_store([dataclasses.replace(s, id=f"{s.id}-r{r}") for r in range(args.replicas) for s in fixtures],
                        store)
            source = SceneStoreSource(store)
            wall, stats = end_to_end(source, os.path.join(tmp, "out-fixtures"),
                                     ScoreOptions(batch_size=16 * ndev, workers=args.workers,
                                                  pad=source.pad_spec()))
            rows.append(f"{'fix':>5} {'store e2e':<12} {len(source):>6} {stats.proposals:>9} {wall:>7.1f} "
                        f"{stats.compile_s:>9.1f} {stats.proposals / wall:>10,.0f} {stats.proposals_per_s:>13,.0f} "
                        f"{stats.proposals / (wall - stats.compile_s):>12,.0f} {stats.proposals / wall * ref_s:>8,.0f} {stats.compiles:>8} {stats.overflow_batches:>9}")
            print(rows[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n" + header + "\n" + "\n".join(rows))
    print("\nprop/s: whole run incl. compile; after compile: from the end of the first batch (the prescan's reading, before it, "
          "not counted); excl compile: the whole run's wall time less the compile time; x ref: prop/s over the "
          "reference's; compiles: traces of the scoring program (1 = no recompile); overflows: batches that "
          "overflowed the prescanned capacities (re-scored at grown capacities: one more compile each); cpu s: CPU time of "
          "the whole run, all threads of this process; faults: minor page faults of the run (thousands; e2e#N: the same run again in this process); prop/cpu-s: proposals per CPU second (all threads) after the "
          "first batch (e2e) or of the best batch (step), less sensitive to load than wall rates. step: best batch time, device-resident "
          f"batch, at its own capacities; step@run: the same at the capacities the end-to-end run fixed from all its "
          f"batches (what it executes; shown when they differ); with --step-proposals, one step row per batch size (failed: the device could not run it, e.g. out of memory); --parts: broad phase, map areas, nc, ttc, rules (on the packed scene) and unculled (the rules without the broad phase), each its own program on the first step row's batch; step@run all: one pass looping back to back over every batch of the run at those capacities (device-resident, best of two passes; wall and cpu s of the pass): the ceiling of the end-to-end rate, as batches differ in cost; host-packed: numpy broad phase + two-program step per batch. load average at the end "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
