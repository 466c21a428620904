"""Streaming, sharded, resumable batch scoring (the engine behind ``jaxdrive score``).

Data flow: a ``SceneSource`` is cut into shards of ``shard_size`` scenes; the scenes of each batch are read/generated
and padded to one fixed ``PadSpec`` (so one compile serves the run), with filler scenes up to a multiple of the device
count (every proposal invalid: they use no culling capacity), by ``read_padded``: in ``workers`` reader processes, or
in one reader thread when there is one worker (a store's batches are slices of its padded copy instead), up to
``READ_AHEAD_BYTES`` of padded batches ahead of the device (so the first compile's seconds are spent reading the
run). A producer thread ``device_put``s each batch sharded over the mesh's ``data`` axis, while the main thread runs
the jitted scorer (``jaxdrive.scorer``: the exact broad phase inside the program, at capacities fixed up front) on
the previous batch. Results come back to the host per batch and are written per shard (see ``outputs.py``).

Capacities: from a scene store, the per-scene needs it keeps size every batch of the run at once
(``CAPACITY_HEADROOM`` above them); otherwise ``prescan_count`` of the run's own batches (``prescan_picks``: at least
``PRESCAN_BATCHES``, and at least ``PRESCAN_SCENES`` scenes) are read before the first compile (and kept, up to
``PRESCAN_KEEP_BYTES``, to be scored without reading them again); the largest of their broad-phase needs, with
``SAMPLED_HEADROOM`` (``CAPACITY_HEADROOM`` when they are every batch of the run), fixes the capacities (and the
largest scenes fix the ``PadSpec``). The program is the culled scorer alone (``score_with_overflow(...,
fallback=False)``: compiling the unculled kernels too would double the compile time, and they run ~30x slower). A
later batch that needs more is re-scored at capacities grown to cover it (``grown_capacity``: one recompile; the
grown capacities serve the rest of the run; counted in ``RunStats.overflow_batches``), so results never depend on
capacities and the scorer compiles once per run for scenes of one distribution. Each completed shard records the
capacities and PadSpec the run had reached (``shapes_record``); a resume starts from them (``resumed_shapes``) rather
than from its remaining batches alone, so it scores at the interrupted run's shapes (grown only where its batches need
more) and the compiled program comes from the XLA cache.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import itertools
import json
import math
import os
import queue
import threading
import time
from typing import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxdrive import exported, parallel
from jaxdrive.broadphase import PackSpec
from jaxdrive.broadphase.device import needs, needs_of
from jaxdrive.errors import UserInputError
from jaxdrive.json_values import is_finite_number
from jaxdrive.metrics import AGGREGATES, GATES, STEPS
from jaxdrive.rules.epdms import SubScores
from jaxdrive.scorer import capacity_for, score_with_overflow
from jaxdrive.scene import HostScene, PadSpec, batch_scenes, grow_batch
from jaxdrive.scoring.outputs import RunDir, listed
from jaxdrive.scoring.sources import SceneSource, SourceError

METRICS = GATES  # the gated sub-metrics, in gate order (jaxdrive.metrics)
EP_MODES = ("scene", "batch", "reference")
DEFAULT_PAD = PadSpec(proposals=16, agents=32, areas=24, area_vertices=96, lanes=64, lane_vertices=96, centerline=512)


PRESCAN_BATCHES = 16  # batches of the run whose broad-phase needs fix its capacities, at least
PRESCAN_SCENES = 256  # and at least this many scenes (small batches: a device group's needs vary more)
PRESCAN_KEEP_BYTES = 512 << 20  # padded arrays of scanned batches held for the run instead of read again
READ_AHEAD_BYTES = 256 << 20  # padded batches read ahead of the device (at least two per reader)
AUTO_READER_SCENES = 512  # runs this long get reader processes from ``auto_workers`` (each takes ~2 s to start)
MAX_AUTO_READERS = 4
CAPACITY_HEADROOM = 1.25  # above needs measured on every batch of the run
# Above needs measured on a sample of the run's batches: room for the batches the prescan did not see. Simulated on
# 1,024 default synthetic scenes (prescan of 256, 300 shuffles): a run with an overflow in 43-71 % of the shuffles at
# 1.25 for 1, 2, 4 or 16 scenes per device, 0-7 % at 1.5 (with ``scorer.RED_HEADROOM``); at K = 16 and K = 256 a
# step takes the same time at 1.5 as at 1.25 (docs/scoring-at-scale.md).
SAMPLED_HEADROOM = 1.5
OVERFLOW_GROWTH = 2.0  # a field that overflowed grows to at least twice its capacity (each growth is a recompile)


@dataclasses.dataclass
class ScoreOptions:
    batch_size: int = 16  # scenes per batch (sharded over the devices; ~16 per CPU device is fastest)
    shard_size: int = 256  # scenes per output shard
    ep_mode: str = "scene"
    simulate: bool = False  # run NAVSIM's LQR/bicycle simulation on the proposals first
    num_devices: int | None = None  # None = all local devices
    gates: np.ndarray | dict | None = None  # bool [9] (all scenes) in METRICS order, or scene id -> bool [9] or
    # [K, 9] (per scene / per proposal); None = all on (EPDMS)
    human_filter: bool = False  # NAVSIM's human penalty filter where a scene has a logged human future
    reference_progress: dict[str, float] | None = None  # scene id -> metres, for ep_mode="reference"
    pad: PadSpec = DEFAULT_PAD
    workers: int = 1  # processes reading / generating scenes (1: a thread of this process reads them)

    def validate(self) -> None:
        if self.batch_size < 1:
            raise UserInputError(f"--batch-size: expected >= 1 scenes per batch, got {self.batch_size}")
        if self.workers < 1:
            raise UserInputError(f"--workers: expected >= 1 processes, got {self.workers}")
        if self.shard_size < 1:
            raise UserInputError(f"--shard-size: expected >= 1 scenes per shard, got {self.shard_size}")
        if self.ep_mode not in EP_MODES:
            raise UserInputError(f"--ep-mode: expected one of {', '.join(EP_MODES)}, got {self.ep_mode!r}")
        if self.ep_mode == "reference" and not self.reference_progress:
            raise UserInputError("--ep-mode reference needs --reference-progress FILE (scene id -> metres)")
        if self.reference_progress is not None and self.ep_mode != "reference":
            raise UserInputError(f"--reference-progress: used only with --ep-mode reference (this run's EP normaliser is "
                             f"{self.ep_mode!r}); add --ep-mode reference or leave the file out")
        if self.reference_progress is not None and not isinstance(self.reference_progress, dict):
            raise UserInputError(f"--reference-progress: expected a JSON object {{scene id: metres}}, "
                             f"got {type(self.reference_progress).__name__}")
        for sid, value in (self.reference_progress or {}).items():
            if not is_finite_number(value) or value < 0:
                raise UserInputError(f"--reference-progress: scene {sid!r}: expected a finite, non-negative number of "
                                 f"metres, got {value!r}")
        if isinstance(self.gates, dict):
            for sid, g in self.gates.items():
                _gate_rows(g, f"--gates: scene {sid!r}")
        elif self.gates is not None:
            _gate_rows(self.gates, "--gates")
            if np.asarray(self.gates).ndim != 1:
                raise UserInputError(f"--gates: a global vector is {len(METRICS)} booleans; per-proposal gates are given "
                                 f"per scene ({{scene id: [[...] per proposal]}})")

    def identity(self) -> dict:
        """The options that change results (stored in the manifest; a resume must match them). A per-scene gate
        table or reference map larger than ``INLINE_IDENTITY_BYTES`` is stored as its digest (``_digest``)."""
        gates = None if self.gates is None else {k: np.asarray(v).tolist() for k, v in self.gates.items()} \
            if isinstance(self.gates, dict) else np.asarray(self.gates).tolist()
        return {"ep_mode": self.ep_mode, "simulate": self.simulate, "shard_size": self.shard_size,
                # with --ep-mode batch a proposal's EP depends on the other scenes of its batch
                "batch_size": self.batch_size if self.ep_mode == "batch" else None,
                "gates": _digest(gates),
                "human_filter": self.human_filter,
                "reference_progress": _digest(self.reference_progress)}


INLINE_IDENTITY_BYTES = 4096  # larger identity values go into the manifest as a digest


def _digest(value):
    """``value`` itself when its canonical JSON is at most ``INLINE_IDENTITY_BYTES``, else its SHA-256 and size: the
    manifest is rewritten after every shard, and a judge's per-proposal gate table for 100,000 scenes is ~180 MB."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    if len(text) <= INLINE_IDENTITY_BYTES:
        return value
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "json_bytes": len(text)}


def _gate_rows(g, what: str) -> np.ndarray:
    """bool [9] or [K, 9] gates from JSON (booleans only), or a ValueError naming ``what``."""
    arr = np.asarray(g, dtype=object)
    if arr.ndim not in (1, 2) or arr.shape[-1] != len(METRICS) or not all(isinstance(x, (bool, np.bool_))
                                                                            for x in arr.ravel()):
        got = repr(g)
        raise UserInputError(f"{what}: expected {len(METRICS)} booleans in the order {', '.join(METRICS)} (or one such "
                         f"list per proposal), got {got if len(got) <= 200 else got[:200] + '...'}")
    return arr.astype(bool)


@dataclasses.dataclass
class RunStats:
    """Totals of a run, for the summary table and the plot."""

    proposals: int = 0
    scenes: int = 0
    errors: list = dataclasses.field(default_factory=list)
    sums: dict = dataclasses.field(default_factory=lambda: {m: 0.0 for m in METRICS + AGGREGATES})
    counts: dict = dataclasses.field(default_factory=lambda: {m: 0 for m in METRICS + AGGREGATES})
    violations: dict = dataclasses.field(default_factory=lambda: {m: 0 for m in METRICS})
    hist_edges: np.ndarray = dataclasses.field(default_factory=lambda: np.linspace(0.0, 1.0, 41))
    hists: dict = dataclasses.field(default_factory=lambda: {m: np.zeros(40, np.int64) for m in AGGREGATES + ("ep",)})
    compile_s: float = 0.0
    score_s: float = 0.0  # wall time of the streaming loop after the first (compiling) batch
    score_cpu_s: float = 0.0  # CPU time of this process (all threads) over the same span
    input_wait_s: float = 0.0  # of score_s: time the loop waited for its next batch (read / generate / pad)
    scored_after_compile: int = 0
    scored: int = 0  # proposals this invocation scored (the first batch's too)
    wall_s: float = 0.0  # this invocation's wall time, start to last shard written (prescan, compile, reading too)
    skipped_shards: int = 0
    unread: int = 0  # scenes this invocation could not score: unreadable, a repeated id (the whole run's: errors)
    compiles: int = 0  # scoring programs built: traced, loaded or reused from memory (1 for a run at one shape)
    overflow_batches: int = 0  # batches that overflowed the capacities (re-scored at grown capacities)
    capacity: PackSpec | None = None
    pad: PadSpec | None = None  # the PadSpec of the batches scored last (the largest: a run's PadSpec only grows)

    def add(self, cols: dict[str, np.ndarray]) -> None:
        n = len(cols["epdms"])
        self.proposals += n
        for m in METRICS + AGGREGATES:
            v = cols[m][np.isfinite(cols[m])]
            self.sums[m] += float(v.sum())
            self.counts[m] += int(v.size)
            if m in METRICS:
                self.violations[m] += int((v < 1.0).sum())
        for m in self.hists:
            v = cols[m][np.isfinite(cols[m])]
            self.hists[m] += np.histogram(np.clip(v, 0, 1), self.hist_edges)[0]

    def mean(self, m: str) -> float:
        return self.sums[m] / self.counts[m] if self.counts[m] else float("nan")

    def rate(self, m: str) -> float:
        return self.violations[m] / self.counts[m] if self.counts[m] else float("nan")

    @property
    def proposals_per_s(self) -> float:
        return self.scored_after_compile / self.score_s if self.score_s > 0 else float("nan")

    @property
    def end_to_end_per_s(self) -> float:
        return self.scored / self.wall_s if self.wall_s > 0 else float("nan")


def make_mesh(num_devices: int | None = None) -> Mesh:
    """The project's mesh (``jaxdrive.parallel.make_mesh``) with every device on ``data``, over this process's devices
    (in a multi-process run each process scores its own shards); batches are sharded over ``data``."""
    devices = jax.local_devices()
    if num_devices is not None:
        if not 1 <= num_devices <= len(devices):
            raise UserInputError(f"--devices: expected 1..{len(devices)} (available: {len(devices)}), got {num_devices}"
                             + ("; on a CPU, add --cpu-devices N to split it into N devices"
                                if devices[0].platform == "cpu" else ""))
        devices = devices[:num_devices]
    return parallel.make_mesh(data=len(devices), devices=devices)


def build_step(mesh: Mesh, options: ScoreOptions, capacity: PackSpec, stats: RunStats | None = None) -> Callable:
    """(scene[B], proposals[B,K], gates[B,K,9], reference[B]) -> (SubScores[B,K], overflow), sharded over data.

    One jitted program (``jaxdrive.scorer.score_with_overflow``, no unculled fallback): the broad phase at
    ``capacity``, per device group of scenes, then every rule and the aggregation; rows are valid only where
    ``overflow`` is False. Traced once per machine (``exported.cached_jit``: a later run loads the lowered program);
    ``stats.compiles`` counts the programs built.
    """
    data = NamedSharding(mesh, PartitionSpec("data"))
    groups = mesh.devices.size

    def step(scene, proposals, gates, reference):
        return score_with_overflow(scene, proposals, capacity=capacity, ep_mode=options.ep_mode,
                                   reference_progress=reference if options.ep_mode == "reference" else None,
                                   gates=None if options.gates is None else gates,
                                   apply_human_filter=options.human_filter, groups=groups, fallback=False)

    def built():
        if stats is not None:
            stats.compiles += 1

    out = (jax.tree.map(lambda _: data, _SUBSCORES_TEMPLATE), NamedSharding(mesh, PartitionSpec()))
    key = f"{capacity}|{options.ep_mode}|gates={options.gates is not None}|human_filter={options.human_filter}"
    return exported.cached_jit("score_step", step, key, data, out, on_build=built)


_SUBSCORES_TEMPLATE = SubScores(**{f.name: 0 for f in dataclasses.fields(SubScores)})  # the step's output tree


def resimulate(states: jnp.ndarray) -> jnp.ndarray:
    """NAVSIM's view of a planner output: keep the 8 poses at 0.5 s steps, re-simulate them with the LQR tracker.

    states [..., 41, 11] (ego-centred) -> [..., 41, 11]: the poses at t = 0.5 .. 4.0 s, expressed in the initial
    rear-axle frame, are what a NAVSIM agent submits; the tracker + bicycle model turn them back into 41 states.
    """
    from jaxdrive.sim import simulate_local

    init = states[..., 0, :]
    pts = states[..., 5::5, :3]  # (..., 8, 3) global-frame (ego-centred) poses
    c, s = jnp.cos(init[..., 2]), jnp.sin(init[..., 2])
    dx = pts[..., 0] - init[..., None, 0]
    dy = pts[..., 1] - init[..., None, 1]
    local = jnp.stack([c[..., None] * dx + s[..., None] * dy, -s[..., None] * dx + c[..., None] * dy,
                       jnp.arctan2(jnp.sin(pts[..., 2] - init[..., None, 2]), jnp.cos(pts[..., 2] - init[..., None, 2]))],
                      axis=-1)
    return simulate_local(init, local)


_resimulate_jit = jax.jit(resimulate)


def _columns(sub: SubScores, ids: Sequence[str], names: Sequence[Sequence[str]], counts: Sequence[int]) -> dict:
    """Host rows (one per real proposal) from a [B, K] result; padded scenes/proposals are dropped."""
    counts = np.asarray(counts, np.int64)
    k = int(np.asarray(sub.epdms).shape[1])
    keep = (np.arange(k)[None, :] < counts[:, None]).ravel()  # row-major (scene, proposal) order
    sel_k = np.broadcast_to(np.arange(k, dtype=np.int32), (len(counts), k)).ravel()[keep]
    cols = {"scene_id": np.repeat(np.asarray(list(ids), dtype=object), counts),
            "proposal": sel_k,
            "proposal_name": np.fromiter(itertools.chain.from_iterable(n[:c] for n, c in zip(names, counts)),
                                         dtype=object, count=int(counts.sum()))}
    for f in METRICS + AGGREGATES + STEPS + ("raw_progress",):
        a = np.asarray(getattr(sub, f))
        v = a[:len(counts)].reshape(len(counts) * k, *a.shape[2:])[keep]
        cols[f] = v.astype(np.int32) if f.endswith("_step") else v.astype(np.float64)
    return cols


def _scored_ids(run: RunDir) -> dict[str, str]:
    """{scene id: where it came from} of the scenes in the run's completed shards (a resumed run)."""
    return {sid: "an earlier invocation of this run" for sid in run.scored_scene_ids()}


def _repeated_ids(batch: "_Batch", first_seen: dict[str, str] | None) -> list[tuple[int, dict]]:
    """(index in the batch, error record) of each scene whose id this run has scored already (two scene files with
    one id: only the first is scored, the others are named in errors.jsonl); records the batch's new ids. None:
    the source's ids are unique."""
    if first_seen is None:
        return []
    repeated = []
    for j, sid in enumerate(batch.ids):
        where = batch.sources[j] if j < len(batch.sources) else f"scene {sid!r}"
        if sid in first_seen:
            repeated.append((j, {"name": where, "error": f"scene id {sid!r} was already scored in this run (from "
                                                         f"{first_seen[sid]}): each scene id is scored once"}))
        else:
            first_seen[sid] = where
    return repeated


def _drop_scenes(cols: dict, counts: Sequence[int], drop: Sequence[int]) -> dict:
    """``_columns`` rows without those of the scenes at ``drop`` (indices into the batch)."""
    keep = ~np.isin(np.repeat(np.arange(len(counts)), counts), drop)
    return {k: v[keep] for k, v in cols.items()}


def _empty_columns() -> dict:
    cols = {"scene_id": np.asarray([], object), "proposal": np.zeros(0, np.int32), "proposal_name": np.asarray([], object)}
    for f in METRICS + AGGREGATES + ("raw_progress",):
        cols[f] = np.zeros(0, np.float64)
    for f in STEPS:
        cols[f] = np.zeros(0, np.int32)
    return cols


def _concat(parts: list[dict]) -> dict:
    if not parts:
        return _empty_columns()
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


@dataclasses.dataclass
class _Batch:
    shard: int
    last_in_shard: bool
    arrays: tuple | None  # device arrays (scene, proposals, gates, reference) or None if no scene in this batch
    ids: list
    names: list
    counts: list
    errors: list
    sources: list = dataclasses.field(default_factory=list)  # where each scene comes from (``SceneSource.name``)
    pad: PadSpec | None = None  # the PadSpec its arrays are padded to (set when they are queued)


def grown_capacity(capacity: PackSpec, need: PackSpec) -> PackSpec:
    """``capacity`` with each field that ``need`` exceeds raised to ``SAMPLED_HEADROOM`` above the need (rounded as
    ``capacity_for`` rounds) and to at least ``OVERFLOW_GROWTH`` x its old value; the other fields kept."""
    room = capacity_for(need, SAMPLED_HEADROOM)

    def field(name: str) -> int:
        have, want = getattr(capacity, name), getattr(need, name)
        return have if want <= have else max(getattr(room, name), math.ceil(have * OVERFLOW_GROWTH))

    return PackSpec(**{f.name: field(f.name) for f in dataclasses.fields(PackSpec)})


def shapes_record(stats: RunStats, mesh: Mesh, options: ScoreOptions) -> dict | None:
    """What a completed shard's record keeps of the run's program shapes (``RunDir.write_shard``): the capacities
    and PadSpec reached so far, with the device count and batch size they hold for; None before any batch was
    scored."""
    if stats.capacity is None or stats.pad is None:
        return None
    return {"devices": mesh.devices.size, "batch_size": options.batch_size,
            "capacity": dataclasses.asdict(stats.capacity), "pad": dataclasses.asdict(stats.pad)}


def resumed_shapes(run: RunDir, devices: int, batch_size: int) -> tuple[PackSpec | None, PadSpec | None]:
    """The capacities and PadSpec a resumed run starts from: the field-wise largest of those its completed shards
    recorded (``shapes_record``) for ``devices`` devices and batches of ``batch_size`` scenes, or (None, None). A
    resume whose remaining scenes fit them scores at the first run's shapes, so the program compiled for them is
    found in the XLA cache instead of compiled again. A record that is not one of ours (an edited manifest, another
    device count) is passed over: these are only where the run starts, the prescan and the on-device overflow check
    still grow them as its batches need."""
    capacities, pads = [], []
    for record in run.recorded_shapes():
        if not isinstance(record, dict) or record.get("devices") != devices or record.get("batch_size") != batch_size:
            continue
        capacity, pad = _spec(PackSpec, record.get("capacity")), _spec(PadSpec, record.get("pad"))
        if capacity is not None and pad is not None:
            capacities.append(capacity)
            pads.append(pad)
    if not capacities:
        return None, None
    return capacities[0].union(*capacities[1:]), pads[0].union(*pads[1:])


def _spec(cls, values):
    """``cls`` (PackSpec or PadSpec) of a recorded dict of its fields, each a positive integer, or None."""
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(values, dict) or set(values) != names or \
            not all(type(v) is int and v >= 1 for v in values.values()):
        return None
    return cls(**values)


def prescan_count(batch_size: int) -> int:
    """Batches a run's prescan reads when its batches hold ``batch_size`` scenes on average: ``PRESCAN_BATCHES``, and
    at least ``PRESCAN_SCENES`` scenes."""
    return max(PRESCAN_BATCHES, -(-PRESCAN_SCENES // max(1, batch_size)))


def prescan_picks(batches: int, count: int) -> list[int]:
    """Indices of the batches a run's prescan reads: the first batch, then one batch from each of the other
    ``count - 1`` equal strata of the run, drawn at random within its stratum (seeded: a run reads the same batches
    every time); every batch if there are at most ``count``.

    Not evenly spaced: a store in a periodic order aliases with a fixed stride (16 scenes repeated in batches of 4
    make 4 batch compositions; 16 evenly spaced picks of 120 batches are all at positions 0 or 3 mod 4, so the
    prescan never saw two of the compositions and a later batch overflowed: one recompile mid-run).
    """
    count = max(1, min(batches, count))
    edges = np.linspace(0, batches, count + 1).round().astype(int)
    rng = np.random.default_rng(0)
    return [0] + [int(rng.integers(lo, hi)) for lo, hi in zip(edges[1:-1], edges[2:])]


class _Producer(threading.Thread):
    """Reads/generates, pads and transfers batches ahead of the device (bounded queue = bounded memory)."""

    def __init__(self, source: SceneSource, run: RunDir, options: ScoreOptions, mesh: Mesh, out: queue.Queue):
        super().__init__(daemon=True)
        self.source, self.rundir, self.options, self.mesh, self.out = source, run, options, mesh, out
        self.pad = options.pad
        self.capacity: PackSpec | None = None  # fixed by _prescan before the first batch is queued
        # a store's padded copy at this run's PadSpec: batches are slices of it (no scene decoded or padded)
        self.padded = source.padded(self.pad)
        # a resumed run starts from the shapes its completed shards were scored at (``resumed_shapes``)
        self.resumed_capacity, resumed_pad = resumed_shapes(run, mesh.devices.size, options.batch_size)
        if self.padded is None and resumed_pad is not None:
            self.pad = self.pad.union(resumed_pad)
        self.failure: BaseException | None = None
        self.stop = threading.Event()
        self.ahead = 2 * options.workers  # batches read ahead by the readers (``read_ahead`` once one was read)

    def _rows(self, n: int) -> int:
        """Scenes of a batch of ``n``: at least ``batch_size``, a multiple of the device count (filler scenes)."""
        ndev = self.mesh.devices.size
        return -(-max(self.options.batch_size, n) // ndev) * ndev

    def _adopt(self, read: tuple):
        """(``_Batch``, padded host (scene, proposals) or None) of a ``read_padded`` result: the run's PadSpec grows to cover it (rarely: a recompile); one padded smaller than the run's PadSpec (read
        before another batch grew it) is re-padded to the run's (``grow_batch``: the same arrays, nothing read
        again). ``_complete`` turns the arrays into the step's inputs."""
        pad, batch, arrays = read
        if arrays is None:
            return batch, None
        self.pad = self.pad.union(pad)
        if pad != self.pad:
            arrays = grow_batch(*arrays, self.pad)
        return batch, arrays

    def _reads(self, ranges: list[tuple[int, int]], readers: Readers) -> Iterator[tuple]:
        """``read_padded`` results of ``ranges``, in order, each padded to the run's PadSpec when it was submitted."""
        return read_batches(readers, ranges, lambda: self.pad, self._rows(self.options.batch_size),
                            self.ahead, self.stop)

    def _padded_batch(self, start: int, stop: int):
        """((scene, proposals, gates, reference) or None, ``_Batch``) of items ``start:stop`` from the store's padded
        copy (a slice of memory maps), each row checked against its checksum: a scene whose row differs from the one
        written is left out and named in the batch's errors (None: none was left)."""
        from jaxdrive.scene import Proposals
        from jaxdrive.scene.device import _build

        copy = self.padded
        scene, props, good, bad = copy.checked_batch(start, stop, self._rows(stop - start))
        batch = _Batch(-1, False, None, [copy.ids[i] for i in good], [copy.names[i] for i in good],
                       [copy.counts[i] for i in good],
                       [{"name": self.source.name(i), "error": f"corrupt store record: {why}"}
                        for i, why in bad.items()])
        if scene is None:
            return None, batch
        return self._complete(_build(scene), Proposals(**props), batch.ids, batch.counts), batch

    def _inputs(self, batch: "_Batch", padded: tuple | None):
        """The step's inputs (``_complete``) of a read batch's padded (scene, proposals), or None (no scene read)."""
        return None if padded is None else self._complete(*padded, batch.ids, batch.counts, batch.sources)

    def _complete(self, scene, props, ids: list[str], counts: list[int], names: list[str] | None = None):
        """(scene, proposals, gates, reference) of a padded batch whose first ``len(ids)`` scenes are real (read from
        ``names``, for messages). Per-proposal gate rows are checked against the scenes' proposal counts here for
        the sources that know them only by reading the scene (``check_entries`` checked the others)."""
        b = props.valid.shape[0]
        props = props.replace(valid=props.valid & (np.arange(b) < len(ids))[:, None])
        if self.options.simulate:
            props = props.replace(states=np.asarray(_resimulate_jit(props.states)))
        gates = np.ones((b, props.valid.shape[1], len(METRICS)), bool)
        if isinstance(self.options.gates, dict):
            for i, (sid, k) in enumerate(zip(ids, counts)):
                if sid not in self.options.gates:
                    raise UserInputError(f"--gates: no entry for scene {sid!r}")
                rows = _gate_rows(self.options.gates[sid], f"--gates: scene {sid!r}")
                if rows.ndim == 2 and rows.shape[0] != k:
                    where = f" ({names[i]})" if names else ""
                    raise StoppedAtScene(f"--gates: scene {sid!r}{where}: expected {k} rows (one per proposal), "
                                         f"got {rows.shape[0]}")
                gates[i, :k] = rows
        elif self.options.gates is not None:
            gates[:] = _gate_rows(self.options.gates, "--gates")
        ref = np.zeros((b,), np.float32)
        if self.options.reference_progress:
            for i, sid in enumerate(ids):
                if sid not in self.options.reference_progress:
                    raise UserInputError(f"--reference-progress: no entry for scene {sid!r}")
                ref[i] = self.options.reference_progress[sid]
        return scene, props, gates, ref

    def _prescan(self, ranges: list[tuple[int, int]], readers: Readers | None) -> dict[int, tuple]:
        """Fix the run's capacities (and grow its PadSpec) from up to ``prescan_count`` of its own batches
        (``prescan_picks``): ``SAMPLED_HEADROOM`` above the largest needs (``CAPACITY_HEADROOM`` if that was every
        batch). Returns the scanned batches (by index into
        ``ranges``: the PadSpec they were padded to, their ``_Batch`` and padded arrays), up to ``PRESCAN_KEEP_BYTES``
        of arrays: the run scores them without reading them again (a store's batches are slices of its padded copy:
        none kept). A store whose padded copy holds current per-scene needs (``data.store.NEEDS_FILE``) is sized from
        all the run's batches at once, none read (a batch should then never overflow; the on-device check stays)."""
        ndev = self.mesh.devices.size
        in_run = sum(stop - start for start, stop in ranges)  # batches end at shard ends: fewer than batch_size
        picks = prescan_picks(len(ranges), prescan_count(in_run // max(1, len(ranges))))
        scanned, kept, kept_bytes, largest = [], {}, 0, 0
        from_needs = self.padded is not None and self.padded.needs is not None and not self.options.simulate
        every_batch = from_needs or len(picks) == len(ranges)
        if from_needs:
            per = self._rows(self.options.batch_size) // ndev  # every batch: the same rows, filler rows last
            scenes = np.concatenate([np.arange(a, b) for a, b in ranges])
            group = np.concatenate([i * ndev + np.arange(b - a) // per for i, (a, b) in enumerate(ranges)])
            scanned = [needs_of(self.padded.needs[scenes], group, per)]  # every batch of the run, none read
        elif self.padded is not None:  # numpy and XLA release the GIL: one thread per core
            with concurrent.futures.ThreadPoolExecutor(min(len(picks), os.cpu_count() or 1)) as threads:
                arrays = list(threads.map(lambda i: self._padded_batch(*ranges[i])[0], picks))
                scanned = [needs(*a[:2], ndev) for a in arrays if a is not None]
        else:
            for i, read in zip(picks, self._reads([ranges[i] for i in picks], readers)):
                batch, padded = self._adopt(read)
                arrays = self._inputs(batch, padded)
                if arrays is not None:
                    scanned.append(needs(*arrays[:2], ndev))
                size = sum(leaf.nbytes for leaf in jax.tree.leaves(arrays))
                largest = max(largest, size)
                if kept_bytes + size <= PRESCAN_KEEP_BYTES:  # the padded arrays too (shared unless --simulate)
                    kept[i], kept_bytes = (self.pad, batch, padded, arrays), kept_bytes + size
        if largest:
            self.ahead = read_ahead(largest, self.options.workers)
        most = PackSpec(**{f.name: 1 for f in dataclasses.fields(PackSpec)}).union(*scanned)
        if self.resumed_capacity is not None:  # the first run's capacities, grown only where these batches need more
            self.capacity = grown_capacity(self.resumed_capacity, most)
        else:
            self.capacity = capacity_for(most, CAPACITY_HEADROOM if every_batch else SAMPLED_HEADROOM)
        return kept

    def _emit(self, batch: "_Batch", arrays) -> None:
        if arrays is not None:
            batch.arrays = jax.device_put(arrays, NamedSharding(self.mesh, PartitionSpec("data")))
            batch.pad = self.pad
        self.out.put(("batch", batch))

    def _plan(self) -> list[tuple]:
        """("skip", shard, scenes) for completed shards, ("batch", shard, start, stop, last) for the rest."""
        n, size, bs = len(self.source), self.options.shard_size, self.options.batch_size
        plan = []
        for shard in range((n + size - 1) // size):
            start, stop = shard * size, min(n, (shard + 1) * size)
            if not self.rundir.owns(shard):
                continue
            if self.rundir.is_done(shard):
                plan.append(("skip", shard, stop - start))
                continue
            plan.extend(("batch", shard, b, min(stop, b + bs), b + bs >= stop) for b in range(start, stop, bs))
        return plan

    def run(self) -> None:
        readers = None
        try:
            if self.padded is None:
                readers = Readers(self.source, self.options.workers)
            plan = self._plan()
            ranges = [(entry[2], entry[3]) for entry in plan if entry[0] == "batch"]
            kept = self._prescan(ranges, readers) if ranges else {}
            if self.padded is None:
                reads = self._reads([r for i, r in enumerate(ranges) if i not in kept], readers)
            index = itertools.count()  # of the "batch" entries: into ranges
            for entry in plan:
                if entry[0] == "skip":
                    self.out.put(entry)
                    continue
                if self.stop.is_set():
                    return
                _, shard, start, stop, last = entry
                i = next(index)
                if self.padded is not None:
                    arrays, batch = self._padded_batch(start, stop)
                    self._emit(dataclasses.replace(batch, shard=shard, last_in_shard=last), arrays)
                    continue
                if i not in kept:
                    batch, padded = self._adopt(next(reads))
                    arrays = self._inputs(batch, padded)
                else:
                    pad, batch, padded, arrays = kept.pop(i)
                    if padded is not None and pad != self.pad:  # padded before a later scan grew the PadSpec
                        arrays = self._inputs(batch, grow_batch(*padded, self.pad))
                self._emit(dataclasses.replace(batch, shard=shard, last_in_shard=last), arrays)
        except BaseException as e:  # surfaced in the main thread
            self.failure = e
        finally:
            if readers is not None:
                readers.shutdown()
            self.out.put(("end", None))


class _ShardWriter(threading.Thread):
    """Commits shards (``RunDir.write_shard``: parquet file, then manifest) in submission order, off the scoring loop,
    then calls ``on_shard``. After a failure (or an exception from ``on_shard``) it commits nothing more; ``submit``
    and ``close`` re-raise it in the caller's thread."""

    def __init__(self, rundir: RunDir, on_shard: Callable[[int], None] | None):
        super().__init__(daemon=True)
        self.rundir, self.on_shard = rundir, on_shard
        self.queue: queue.Queue = queue.Queue(maxsize=2)  # bounded: at most ~3 shards' rows held
        self.failure: BaseException | None = None

    def run(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.failure is not None:
                continue
            try:
                self.rundir.write_shard(*item)
                if self.on_shard is not None:
                    self.on_shard(item[0])
            except BaseException as e:  # surfaced in the scoring thread
                self.failure = e

    def submit(self, shard: int, columns: dict, errors: list, shapes: dict | None) -> None:
        self._check()
        self.queue.put((shard, columns, errors, shapes))

    def close(self) -> None:
        """Waits until every submitted shard is committed (or the writer failed); re-raises its failure."""
        if self.is_alive():
            self.queue.put(None)
            self.join()
        self._check()

    def _check(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure


def _drain(q: queue.Queue, producer: threading.Thread) -> None:
    """Unblocks a stopped producer (it may wait on the full queue) and waits for it to end: a thread still inside
    JAX when the interpreter exits (after Ctrl-C) aborts the process instead of letting it exit cleanly."""
    while producer.is_alive():
        try:
            q.get(timeout=0.1)
        except queue.Empty:
            pass
    producer.join()


def grown_pad(pad: PadSpec, scenes: Sequence[HostScene]) -> PadSpec:
    """``pad`` grown where a scene of ``scenes`` does not fit it, to ``_round_up`` buckets (so a run of varied scenes
    compiles only a few shapes)."""
    need = PadSpec.fit(scenes)
    grow = lambda have, want: have if want <= have else max(have, _round_up(want))
    return PadSpec(**{f.name: grow(getattr(pad, f.name), getattr(need, f.name)) for f in dataclasses.fields(PadSpec)})


def read_padded(source: SceneSource, start: int, stop: int, pad: PadSpec, rows: int) -> tuple:
    """Items ``start:stop`` of ``source`` read (or generated) and padded, in a reader process or in the producer:
    (the PadSpec used: ``pad`` grown where a scene does not fit it; the batch's ``_Batch`` without arrays, naming its
    scenes and ``SourceError``s; numpy (Scene, Proposals) of ``rows`` scenes, fillers repeating the first, or None when
    no scene was read). Padded arrays cross the process boundary cheaply (a few large buffers, no per-polygon object)."""
    items = list(source.iter_range(start, stop))
    scenes = [s for s in items if isinstance(s, HostScene)]
    batch = _Batch(-1, False, None, [s.id for s in scenes], [s.proposal_names for s in scenes],
                   [s.num_proposals for s in scenes],
                   [{"name": e.name, "error": e.message} for e in items if isinstance(e, SourceError)],
                   [source.name(start + j) for j, s in enumerate(items) if isinstance(s, HostScene)])
    if not scenes:
        return pad, batch, None
    pad = grown_pad(pad, scenes)
    scene, props, _ = batch_scenes(scenes + [scenes[0]] * (rows - len(scenes)), pad, validate=False)
    return pad, batch, (scene, props)


_READER_SOURCE: SceneSource | None = None  # a reader process's source, received once when the process starts


def _receive_source(source: SceneSource) -> None:
    global _READER_SOURCE
    _READER_SOURCE = source


def _read_in_reader_process(start: int, stop: int, pad: PadSpec, rows: int) -> tuple:
    return read_padded(_READER_SOURCE, start, stop, pad, rows)


class Readers:
    """Where ``read_padded`` runs for ``read_batches``: one thread of this process (``workers`` = 1), or ``workers``
    processes (spawned, so no JAX state is forked; ~2 s each to start on a 2-core machine) that receive the source
    once when they start: a task carries only its range, not the source (pickling a 10,000-file directory's list
    costs ~0.1 s per batch to unpickle; a ``--proposals`` file's arrays far more)."""

    def __init__(self, source: SceneSource, workers: int):
        import multiprocessing

        self.source, self.in_process = source, workers == 1
        if self.in_process:
            self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jaxdrive-reader")
        else:
            self.pool = concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn"), initializer=_receive_source,
                initargs=(source,))

    def submit(self, start: int, stop: int, pad: PadSpec, rows: int) -> concurrent.futures.Future:
        """``read_padded(source, start, stop, pad, rows)`` in a reader."""
        if self.in_process:
            return self.pool.submit(read_padded, self.source, start, stop, pad, rows)
        return self.pool.submit(_read_in_reader_process, start, stop, pad, rows)

    def shutdown(self) -> None:
        """Cancel the reads not started; wait for those running."""
        self.pool.shutdown(wait=True, cancel_futures=True)


def auto_workers(source: SceneSource, pad: PadSpec) -> int:
    """``jaxdrive score --workers auto``: reader processes for a run over ``source`` padded to ``pad``. One per usable
    core (at most ``MAX_AUTO_READERS``) when at least ``AUTO_READER_SCENES`` scenes are read or generated; else 1 (a
    reader thread): a shorter run would spend more on starting processes than they save, and a store's padded copy
    has nothing to read (its batches are slices of memory maps). On 2 cores this took the default job (1,024
    synthetic scenes) from 14.3-18.5 s to 10.0-11.8 s when its program is cached (docs/scoring-at-scale.md)."""
    if len(source) < AUTO_READER_SCENES or source.padded(pad) is not None:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(MAX_AUTO_READERS, cores))


def read_ahead(batch_bytes: int, workers: int) -> int:
    """Batches of ``batch_bytes`` read ahead of the device: ``READ_AHEAD_BYTES`` of them, at least two per reader."""
    return max(2 * workers, READ_AHEAD_BYTES // max(batch_bytes, 1))


def read_batches(readers: Readers, ranges: list[tuple[int, int]], pad_of: Callable[[], PadSpec], rows: int,
                 ahead: int = 2, stop: threading.Event | None = None) -> Iterator[tuple]:
    """``read_padded`` of each (start, stop) range of the readers' source, in order, at most ``ahead`` ranges ahead;
    each padded to ``pad_of()`` at its submission."""
    pending: collections.deque = collections.deque()
    todo = iter(ranges)
    for start, end in itertools.islice(todo, ahead):
        pending.append(readers.submit(start, end, pad_of(), rows))
    while pending:
        read = pending.popleft().result()
        nxt = next(todo, None)
        if nxt is not None and not (stop is not None and stop.is_set()):
            pending.append(readers.submit(*nxt, pad_of(), rows))
        yield read


def _round_up(n: int) -> int:
    """Bucket sizes so a run with varied scenes compiles only a few shapes."""
    p = 8
    while p < n:
        p *= 2
    return p


def score_source(source: SceneSource, out_dir, options: ScoreOptions, *, resume: bool = False,
                 progress: bool = True, on_shard: Callable[[int], None] | None = None) -> RunStats:
    """Score every scene of ``source`` into ``out_dir``; returns the run's statistics."""
    options.validate()
    check_entries(source, options)
    from jaxdrive import distributed

    identity = {"source": source.describe(), **options.identity()}
    run = RunDir(out_dir, identity, resume=resume, process_index=distributed.process_index(),
                 process_count=distributed.process_count(), inputs=shard_inputs(source, options.shard_size))
    if distributed.is_main():
        run.say_scored_again()
    try:
        return _score_run(source, run, options, progress=progress, on_shard=on_shard)
    except ValueError as e:  # bad input found mid-run (a scene file's proposals and its --gates rows): exit 2
        run.discard_if_unused()  # a run that scored nothing leaves no directory to block the corrected command
        if isinstance(e, StoppedAtScene) and run.completed:
            raise StoppedAtScene(f"{e}. The run stopped at that scene; the {len(run.completed)} shard(s) completed "
                                 f"before it are kept in {run.path}: correct the scene file and add --resume to "
                                 f"score the rest (a corrected --gates table is another run: give it another --out)"
                                 ) from None
        raise


class StoppedAtScene(UserInputError):
    """Bad input found only when its scene was read, mid-run (``score_source`` says what the run kept)."""


SHOWN_IDS = 3  # missing scene ids (and scenes with per-proposal gate rows of another count) named by ``check_entries``


def check_entries(source: SceneSource, options: ScoreOptions) -> None:
    """Refuses (ValueError) a run whose per-scene ``--gates`` or ``--reference-progress`` table has no entry for
    some scene of ``source``, or whose per-proposal ``--gates`` rows do not number a scene's proposals K where the
    source knows K without reading it (``SceneSource.proposal_counts``), naming the first ``SHOWN_IDS`` such scenes
    and their count, before any scene is read or the scorer compiled (``SceneSource.scene_ids``; a scene the run
    cannot read is not checked: it is reported). The run would otherwise stop at the first batch holding one,
    perhaps hours in (as it still does for rows of scene files whose K only a full parse gives: ``_complete``)."""
    tables = {"--gates": options.gates if isinstance(options.gates, dict) else None,
              "--reference-progress": options.reference_progress}
    tables = {flag: table for flag, table in tables.items() if table}
    if not tables:
        return
    item_ids = source.scene_ids()
    ids = list(dict.fromkeys(sid for sid in item_ids if sid is not None))
    for flag, table in tables.items():
        missing = [sid for sid in ids if sid not in table]
        if missing:
            raise UserInputError(f"{flag}: no entry for {len(missing)} of the run's {len(ids)} scenes: "
                             f"{listed([repr(m) for m in missing], SHOWN_IDS)}; every scene scored needs one")
    gates = tables.get("--gates")
    if gates is None:
        return
    counts: dict[str, int | None] = {}  # scene id -> K, in the run's order
    for sid, k in zip(item_ids, source.proposal_counts(item_ids)):
        if sid is not None:
            counts.setdefault(sid, k)  # a repeated id: its first item is the one scored
    wrong = [f"{sid!r} (expected {k} rows, got {len(gates[sid])})" for sid, k in counts.items()
             if k is not None and np.ndim(gates[sid]) == 2 and len(gates[sid]) != k]
    if wrong:
        raise UserInputError(f"--gates: per-proposal rows of another count than the scene's proposals for {len(wrong)} "
                         f"of the run's {len(ids)} scenes: {listed(wrong, SHOWN_IDS)}; give one row of "
                         f"{len(METRICS)} booleans per proposal (or one vector for the whole scene)")


def shard_inputs(source: SceneSource, shard_size: int) -> dict[str, dict] | None:
    """Per shard (its index as a string, as the manifest keys shards), {input file: [size, mtime_ns]} of the items it
    holds (``SceneSource.input_stats``): taken before the run reads a scene, recorded with each shard it writes
    (``RunDir``); None for a source whose identity covers its content."""
    stats = source.input_stats()
    if stats is None:
        return None
    return {str(shard): dict(stats[start:start + shard_size])
            for shard, start in enumerate(range(0, len(stats), shard_size))}


def _score_run(source: SceneSource, run: RunDir, options: ScoreOptions, *, progress: bool,
               on_shard: Callable[[int], None] | None) -> RunStats:
    from tqdm.auto import tqdm

    from jaxdrive import distributed

    t_start = time.perf_counter()
    mesh = make_mesh(options.num_devices)
    # scene id -> where it was first read: a run scores each scene id once (sources of files may repeat one)
    first_seen = None if source.unique_ids else _scored_ids(run)
    stats = RunStats()
    step = None  # built when the first batch arrives (the producer has fixed the capacities by then)
    q: queue.Queue = queue.Queue(maxsize=2)
    producer = _Producer(source, run, options, mesh, q)
    producer.start()

    size = options.shard_size
    total = sum(min(len(source), (i + 1) * size) - i * size for i in range(-(-len(source) // size)) if run.owns(i))
    bar = tqdm(total=total, unit="scene", disable=not progress or not distributed.is_main(), dynamic_ncols=True,
               desc="scoring")
    shard_parts: list[dict] = []
    shard_errors: list[dict] = []
    writer = _ShardWriter(run, on_shard)
    writer.start()
    pending: tuple | None = None  # (batch, device result) awaiting transfer to host
    t_first_done = c_first_done = None

    def rescore_grown(arrays):
        """Grow the capacities to cover this batch and re-score it: each field it overflowed to
        ``SAMPLED_HEADROOM`` above its needs and at least ``OVERFLOW_GROWTH`` x its capacity (a run whose tail the
        prescan missed recompiles a few times, not once per new largest batch)."""
        nonlocal step
        need = needs(*jax.device_get(arrays[:2]), mesh.devices.size)
        stats.capacity = grown_capacity(stats.capacity, need)
        step = build_step(mesh, options, stats.capacity, stats)
        result, overflow = step(*arrays)
        if bool(overflow):
            raise RuntimeError(f"jaxdrive score: a batch overflowed capacities grown to its own needs ({stats.capacity});"
                               " please report this with the input")
        return result

    def finish(batch: _Batch, result) -> None:
        nonlocal shard_parts, shard_errors, t_first_done, c_first_done
        repeated = _repeated_ids(batch, first_seen)
        if result is not None:
            result, overflow = result
            if bool(overflow):
                stats.overflow_batches += 1
                result = rescore_grown(batch.arrays)
            cols = _columns(result, batch.ids, batch.names, batch.counts)
            if repeated:
                cols = _drop_scenes(cols, batch.counts, [j for j, _ in repeated])
            shard_parts.append(cols)
            stats.add(cols)
            if t_first_done is None:
                t_first_done, c_first_done = time.perf_counter(), time.process_time()
            else:
                stats.scored_after_compile += len(cols["epdms"])
                stats.score_s = time.perf_counter() - t_first_done
                stats.score_cpu_s = time.process_time() - c_first_done
        errors = batch.errors + [e for _, e in repeated]
        shard_errors.extend(errors)
        stats.errors.extend(errors)
        stats.scenes += len(batch.ids) - len(repeated)
        bar.update(len(batch.ids) + len(batch.errors))
        bar.set_postfix(prop_per_s=f"{stats.proposals_per_s:,.0f}" if stats.score_s else "compiling")
        if batch.last_in_shard:
            writer.submit(batch.shard, _concat(shard_parts), shard_errors, shapes_record(stats, mesh, options))
            shard_parts, shard_errors = [], []

    clean = False
    try:
        while True:
            t_wait = time.perf_counter()
            kind, payload, *rest = q.get()
            if t_first_done is not None:  # the same span as score_s
                stats.input_wait_s += time.perf_counter() - t_wait
            if kind == "end":
                break
            if kind == "skip":
                stats.skipped_shards += 1
                bar.update(rest[0])
                continue
            batch: _Batch = payload
            result = None
            if batch.arrays is not None:
                if step is None:
                    stats.capacity = producer.capacity
                    step = build_step(mesh, options, producer.capacity, stats)
                t0 = time.perf_counter()
                stats.pad = batch.pad
                result = step(*batch.arrays)  # async dispatch: overlaps with finishing the previous batch
                if stats.compile_s == 0.0:
                    jax.block_until_ready(result)
                    stats.compile_s = time.perf_counter() - t0
            if pending is not None:
                finish(*pending)
            pending = (batch, result)
        if pending is not None:
            finish(*pending)
        clean = True
    finally:
        producer.stop.set()
        _drain(q, producer)
        bar.close()
        if clean:
            writer.close()  # every shard committed (or its failure raised) before the run is finished
        else:  # the shards already handed over still commit; the exception in flight is the one reported
            try:
                writer.close()
            except BaseException:
                pass
    if producer.failure is not None:
        raise producer.failure
    run.finish()
    stats.scored, stats.wall_s = stats.proposals, time.perf_counter() - t_start  # summaries count the whole run
    return stats
