"""``jaxdrive vocab``: stream scenes, score each against the whole vocabulary (``core.score_vocabulary``), write
resumable parquet shards (one row per scene x vocabulary trajectory) and optionally the GTRS pickle.

Output directory (``jaxdrive.scoring.outputs.RunDir``): ``manifest.json`` (run identity + completed shards),
``part-*.parquet`` (columns ``scene_id``, ``proposal`` = vocabulary index, ``core.FIELDS``), ``errors.jsonl``
(scenes that could not be read, have no usable reference, or repeat a scene id already scored: each id is scored
once), and with ``--export gtrs`` the pickle ``gtrs_{K}.pkl``: dict token ->
dict metric -> float16 array (K,), metric keys ``GTRS_KEYS`` (what Hydra-MDP / GTRS / DriveSuprim training reads as
``navtrain_{K}.pkl``). A killed run resumed with ``--resume`` recomputes only the shards the manifest does not list
(and those whose scene files changed since), so its files equal an uninterrupted run's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import time
from pathlib import Path
from typing import Callable

import numpy as np

from jaxdrive import atomic
from jaxdrive.errors import UserInputError
from jaxdrive.scene import HostScene, PadSpec
from jaxdrive.scoring.outputs import RunDir, iter_shard_columns
from jaxdrive.scoring.runner import shard_inputs
from jaxdrive.scoring.sources import SceneDirSource, SceneSource, SourceError
from jaxdrive.vocab.core import (EP_MODES, FIELDS, pad_for, rows_per_call, reference_states, score_vocabulary,
                                 vocabulary_states)

GTRS_KEYS = {"no_at_fault_collisions": "nc", "drivable_area_compliance": "dac",
             "driving_direction_compliance": "ddc", "traffic_light_compliance": "tlc", "ego_progress": "ep",
             "time_to_collision_within_bound": "ttc", "lane_keeping": "lk", "history_comfort": "hc",
             "pdm_score": "pdm_score"}


@dataclasses.dataclass
class VocabOptions:
    ep_mode: str = "gtrs"  # "gtrs" (PROGRESS_MODE=gen_gt), "pairwise" (NAVSIM's pairing) or "batch" (core docstring)
    simulate: bool = True  # NAVSIM's LQR + bicycle on each vocabulary trajectory
    human_filter: bool = True
    chunk: int = 1024  # proposals per scoring call (memory bound)
    shard_size: int = 64  # scenes per parquet shard (unit of resume)
    reference: str = "cache"  # "cache": the scene's PDM-Closed reference; "first-proposal": else its proposal 0;
    # "pdm-closed": else PDM-Closed planned here (jaxdrive.planners.pdm_closed)
    export: str | None = None  # None or "gtrs"

    def validate(self) -> None:
        if self.ep_mode not in EP_MODES:
            raise UserInputError(f"--ep-mode: expected one of {', '.join(EP_MODES)}, got {self.ep_mode!r}")
        if self.chunk < 1:
            raise UserInputError(f"--chunk: expected >= 1 proposals per call, got {self.chunk}")
        if self.shard_size < 1:
            raise UserInputError(f"--shard-size: expected >= 1 scenes per shard, got {self.shard_size}")
        if self.reference not in ("cache", "first-proposal", "pdm-closed"):
            raise UserInputError(f"--reference: expected cache, first-proposal or pdm-closed, got {self.reference!r}")
        if self.export not in (None, "gtrs"):
            raise UserInputError(f"--export: expected gtrs, got {self.export!r}")

    def identity(self) -> dict:
        return {"ep_mode": self.ep_mode, "simulate": self.simulate, "human_filter": self.human_filter,
                "shard_size": self.shard_size, "reference": self.reference}


class SceneFileSource(SceneDirSource):
    """Every scene file of a directory (``SceneDirSource``: name order, subfolders, and the files' sizes and times, so
    that a resume scores again a shard whose files changed), with or without proposals (converted metric caches)."""

    def __init__(self, directory: str | Path):
        from jaxdrive.data.store import is_store

        if is_store(directory):
            raise UserInputError(f"--scenes {directory}: is a scene store; `jaxdrive vocab` reads a folder of "
                             f"epdms-scene/1 JSON files (`jaxdrive scenes from-navsim` without --store writes one)")
        super().__init__(directory)

    def load(self, i: int) -> HostScene | SourceError:
        return self.read(i)


def vocabulary_digest(vocab: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(vocab, np.float64).tobytes()).hexdigest()


def _scene_rows(scene: HostScene, vocab: np.ndarray, options: VocabOptions, pad: PadSpec) -> dict | str:
    """Columns of one scene's K rows, or an error message."""
    try:
        reference = reference_states(scene, "first-proposal" if options.reference == "first-proposal" else "none")
    except ValueError as e:
        return str(e)
    if reference is None and options.reference == "pdm-closed":
        from jaxdrive.planners.pdm_closed import plan

        reference = plan(scene)["states"]
    if reference is None:
        return ("no reference trajectory (PDM-Closed: convert NAVSIM metric caches with `jaxdrive scenes from-navsim`, "
                "or pass --reference pdm-closed or first-proposal)")
    states = vocabulary_states(scene.history_states[-1], vocab, simulate=options.simulate, chunk=options.chunk)
    scores = score_vocabulary(scene, vocab, reference, ep_mode=options.ep_mode, simulate=options.simulate,
                              human_filter_on=options.human_filter, chunk=options.chunk, states=states, pad=pad)
    k = vocab.shape[0]
    return {"scene_id": np.asarray([scene.id] * k, dtype=object), "proposal": np.arange(k, dtype=np.int32), **scores}


@dataclasses.dataclass
class VocabStats:
    scenes: int = 0
    rows: int = 0
    errors: list = dataclasses.field(default_factory=list)
    skipped_shards: int = 0
    seconds: float = 0.0


def run_vocab(source: SceneSource, vocab: np.ndarray, out_dir, options: VocabOptions, *, resume: bool = False,
              progress: bool = True, on_shard: Callable[[int], None] | None = None) -> VocabStats:
    """Score every scene of ``source`` against ``vocab`` (K, 40, 3) into ``out_dir``; see the module docstring."""
    from tqdm.auto import tqdm

    options.validate()
    identity = {"source": source.describe(), "vocabulary_sha256": vocabulary_digest(vocab),
                "vocabulary_size": int(vocab.shape[0]), **options.identity()}
    run = RunDir(out_dir, identity, resume=resume, inputs=shard_inputs(source, options.shard_size))
    run.say_scored_again()
    first_seen = dict.fromkeys(run.scored_scene_ids(), "an earlier invocation of this run")  # id -> its scene file
    stats = VocabStats()
    pad = None
    n, size = len(source), options.shard_size
    t0 = time.perf_counter()
    with tqdm(total=n, unit="scene", disable=not progress, dynamic_ncols=True, desc="vocab") as bar:
        for shard in range((n + size - 1) // size):
            start, stop = shard * size, min(n, (shard + 1) * size)
            if run.is_done(shard):
                stats.skipped_shards += 1
                bar.update(stop - start)
                continue
            parts, errors = [], []
            for i in range(start, stop):
                item = source.load(i)
                if not isinstance(item, SourceError):
                    pad = pad_for(item, rows_per_call(vocab.shape[0], options.chunk), pad)
                where = source.name(i)
                if isinstance(item, SourceError):
                    rows = item
                elif item.id in first_seen:
                    rows = SourceError(name=where, message=(f"scene id {item.id!r} was already scored in this run "
                                                            f"(from {first_seen[item.id]}): each id is scored once"))
                else:
                    rows = _scene_rows(item, vocab, options, pad)
                if isinstance(rows, SourceError):
                    errors.append({"name": rows.name, "error": rows.message})
                elif isinstance(rows, str):
                    errors.append({"name": item.id, "error": rows})
                else:
                    first_seen[item.id] = where
                    parts.append(rows)
                    stats.scenes += 1
                    stats.rows += len(rows["proposal"])
                bar.update(1)
            columns = ({k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else
                       {"scene_id": np.asarray([], object), "proposal": np.zeros(0, np.int32),
                        **{f: np.zeros(0, np.float32) for f in FIELDS}})
            run.write_shard(shard, columns, errors)
            stats.errors.extend(errors)
            if on_shard is not None:
                on_shard(shard)
    stats.seconds = time.perf_counter() - t0
    if options.export == "gtrs":
        export_gtrs(out_dir, Path(out_dir) / f"gtrs_{vocab.shape[0]}.pkl", vocab.shape[0])
    return stats


def export_gtrs(run_dir, path, k: int) -> Path:
    """The GTRS pickle of a finished run: token -> {GTRS metric key -> float16 (K,)} in vocabulary order (an empty
    dict when no scene was scored).

    Read shard by shard (a scene's K rows lie in one shard), so memory holds one shard's columns plus the table's
    float16 arrays (9 x 2 bytes x K per scene: ~31 GB for navtrain x 16,384, which pickle must hold at once), not the
    whole run as a DataFrame (~70 bytes a row: ~120 GB there)."""
    table = {}
    for columns in iter_shard_columns(run_dir):
        ids = columns["scene_id"]
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        for start, stop in zip(starts, np.r_[starts[1:], len(ids)]):
            token, proposals = str(ids[start]), columns["proposal"][start:stop]
            if token in table or not np.array_equal(proposals, np.arange(k)):
                raise UserInputError(f"{run_dir}: scene {token!r} does not hold exactly the vocabulary's {k} rows once "
                                 f"(proposals {proposals[:5].tolist()}..., {stop - start} rows)")
            table[token] = {key: np.asarray(columns[col][start:stop], np.float16) for key, col in GTRS_KEYS.items()}
    path = Path(path)
    with atomic.replacing(path) as tmp, open(tmp, "wb") as f:
        pickle.dump(dict(sorted(table.items())), f, protocol=4)
    return path
