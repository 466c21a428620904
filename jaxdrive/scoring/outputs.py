"""Resumable run directory: parquet shards written atomically, and a manifest naming the completed ones.

Layout of ``OUT``::

    manifest.json            run identity (inputs + options) and the completed shards
    part-00000.parquet ...   one row per proposal of the scenes of shard i
    errors.jsonl             scenes that could not be read (by name), one JSON object per line (the manifest's
                             record of the completed shards' errors, rewritten with it: never duplicated by a resume)

A shard file is written to a temporary ``part-i.parquet.<pid>.tmp`` and renamed into place (``jaxdrive.atomic``),
then the manifest is rewritten the same way. A run killed at any point therefore leaves only complete shard files;
on ``--resume`` the shards named in the manifest are kept, every other shard (even a complete file written just
before the kill) is recomputed, so the union of rows equals an uninterrupted run's, none missing and none duplicated.
A shard file that no completed shard's record names is deleted when the run directory is opened, so the files
``OUT/part-*.parquet`` are always the manifest's; a new run refuses a directory holding shard files without a
manifest.
A shard named in the manifest is recomputed too when its file is missing, unreadable (its parquet footer) or holds
another number of rows than recorded, or when its input files changed since it was scored: the manifest records,
per shard, a digest of its input files' sizes and modification times (``input_record`` of ``RunDir(inputs=...)``,
taken before the run read any), and a resume compares it with the files' own (``RunDir.redo``: which shards, why).
A shard's record also keeps the program shapes the run had reached when it was written (``shapes``: the scorer's
capacities and PadSpec), where a resume starts (``runner.resumed_shapes``).

Multi-process runs (``jaxdrive.distributed``): process p scores the shards i with i % N == p and records each one it
commits in its own ``progress/process-<p>.json`` (same record format); the manifest is written once, by process 0,
after a barrier that every process reaches only when all its shards are committed; the progress files are then
folded into it and removed. A resume (with any number of processes) treats the union of the manifest and all progress
files as complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxdrive import atomic

MANIFEST = "manifest.json"
ERRORS = "errors.jsonl"
PROGRESS = "progress"  # per-process records of a multi-process run (folded into the manifest at its end)
MANIFEST_VERSION = 2  # 2: per-shard error records in the manifest; shards without rows have no file


class RunDirError(RuntimeError):
    """The output directory cannot be used (unwritable, or holds a different run)."""


def shard_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


SHARD_GLOB = "part-*.parquet"  # every shard_name


class RunDir:
    """The output directory of one scoring run (``process_index`` of ``process_count`` processes writing it)."""

    def __init__(self, path: str | os.PathLike, identity: dict, *, resume: bool, process_index: int = 0,
                 process_count: int = 1, inputs: dict[str, dict] | None = None):
        """``inputs``: per shard (its index as a string), {input file: [size, mtime_ns]} of the files it reads, taken
        before any is read: recorded with each shard written, compared with each completed shard's record on resume
        (None: the identity covers the inputs' content)."""
        self.path = Path(path)
        self.identity = identity
        self.inputs = inputs
        self.process_index, self.process_count = process_index, process_count
        self.created = not self.path.exists()
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"--out {self.path}: is a file, expected an output directory")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".write_probe.{process_index}"
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
            raise RunDirError(f"--out {self.path}: output directory is not writable ({e.strerror})") from None
        records = [self.path / MANIFEST] + sorted((self.path / PROGRESS).glob("process-*.json"))
        shards = sorted(self.path.glob(SHARD_GLOB))
        if shards and not any(r.exists() for r in records):  # they would be read with this run's: OUT/part-*.parquet
            raise RunDirError(f"--out {self.path}: holds {len(shards)} shard file(s) ({shards[0].name}, ...) but no "
                              f"{MANIFEST} naming them (another run's); choose another output directory or remove them")
        recorded: dict[str, dict] = {}  # every record's completed shards (the progress files' last)
        mine: dict[str, dict] = {}
        for record in (r for r in records if r.exists()):
            if not resume:
                raise RunDirError(f"--out {self.path}: already holds a run ({record.relative_to(self.path)}); pass "
                                  f"--resume to continue it or choose another output directory")
            try:
                manifest = json.loads(record.read_text())
            except json.JSONDecodeError as e:
                raise RunDirError(f"{record}: corrupt manifest ({e})") from None
            old = manifest.get("identity", {})
            if manifest.get("version") != MANIFEST_VERSION or old != identity:
                diff = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
                raise RunDirError(f"{record}: --resume with different inputs/options than the recorded run "
                                  f"(differs in: {', '.join(diff) or 'version'}); use the same arguments or another --out")
            recorded.update(manifest.get("completed", {}))
            if record.name == f"process-{process_index}.json":
                mine = manifest.get("completed", {})
        self.redo = {int(k): why for k, v in recorded.items() if (why := self._stale(k, v))}  # scored again: why
        self.completed = {k: v for k, v in recorded.items() if int(k) not in self.redo}
        self.mine = {k: v for k, v in mine.items() if int(k) not in self.redo}  # this process's (multi-process runs)
        if process_index == 0:  # nobody writes before the barrier below
            for stale in [*self.path.glob("*.tmp"), *(self.path / PROGRESS).glob("*.tmp")]:
                stale.unlink()
            self._remove_uncommitted_shards()
        if process_count == 1:
            self._write_manifest()
            self._write_errors()
            for record in records[1:]:  # an earlier multi-process invocation's, now in the manifest
                record.unlink()
            if (self.path / PROGRESS).is_dir():
                (self.path / PROGRESS).rmdir()
        else:
            from jaxdrive import distributed

            distributed.barrier("scoring run directory read")
            (self.path / PROGRESS).mkdir(exist_ok=True)
            self._write_progress()

    def _remove_uncommitted_shards(self) -> None:
        """Deletes the shard files that no completed shard's record names: one written just before a kill, or the
        old file of a shard this resume scores again (which, its scenes now unreadable, may write none). Readers of
        ``OUT/part-*.parquet`` would otherwise take their rows for this run's."""
        kept = {v["file"] for v in self.completed.values() if v.get("file")}
        for shard in self.path.glob(SHARD_GLOB):
            if shard.name not in kept:
                shard.unlink()

    def discard_if_unused(self) -> None:
        """Remove what this run wrote (its manifest, its empty errors file, any shard file not committed, the
        directory if it made it) when no shard of it was ever completed; a run with completed shards is kept
        (single-process runs only)."""
        if self.completed or self.process_count != 1:
            return
        self._remove_uncommitted_shards()
        for name in (MANIFEST, ERRORS):
            f = self.path / name
            if f.exists() and (name == MANIFEST or f.stat().st_size == 0):
                f.unlink()
        if self.created and not any(self.path.iterdir()):
            self.path.rmdir()

    def _stale(self, shard: str, record: dict) -> str | None:
        """Why a shard that an earlier invocation completed must be scored again (its file, ``_file_problem``; its
        input files, ``_changed_inputs``), or None: it is kept."""
        return _file_problem(self.path, record) or (
            None if self.inputs is None else _changed_inputs(record.get("inputs"), self.inputs[shard]))

    def say_scored_again(self) -> None:
        """Names on stderr the shards of earlier invocations that this resume scores again, and why (``redo``: the
        first ``SHOWN_SHARDS``, then their count)."""
        for shard, why in sorted(self.redo.items())[:SHOWN_SHARDS]:
            print(f"--resume: scoring shard {shard} again: {why}", file=sys.stderr)
        if len(self.redo) > SHOWN_SHARDS:
            print(f"--resume: ... {len(self.redo) - SHOWN_SHARDS} more shards scored again", file=sys.stderr)

    def is_done(self, shard: int) -> bool:
        return str(shard) in self.completed

    def _write_manifest(self) -> None:
        manifest = {"version": MANIFEST_VERSION, "identity": self.identity,
                    "completed": dict(sorted(self.completed.items(), key=lambda kv: int(kv[0])))}
        atomic.write_text(self.path / MANIFEST, json.dumps(manifest, indent=1), fsync=True)

    def write_shard(self, shard: int, columns: dict[str, np.ndarray], errors: list[dict],
                    shapes: dict | None = None) -> None:
        """Write one shard's rows atomically (no file when it has none) and record it as complete, with ``shapes``
        (JSON-able: the program shapes the run had reached, which a resume starts from; ``runner.shapes_record``)."""
        rows = int(len(next(iter(columns.values())))) if columns else 0
        name = shard_name(shard) if rows else None
        if name:
            with atomic.replacing(self.path / name) as tmp:
                pq.write_table(pa.table(columns), tmp)
        self.completed[str(shard)] = {"file": name, "rows": rows, "errors": [dict(e) for e in errors]}
        if shapes is not None:
            self.completed[str(shard)]["shapes"] = shapes
        if self.inputs is not None:
            self.completed[str(shard)]["inputs"] = input_record(self.inputs[str(shard)])
        if self.process_count == 1:
            self._write_manifest()
            self._write_errors()
        else:
            self.completed[str(shard)]["process"] = self.process_index  # which process wrote it
            self.mine[str(shard)] = self.completed[str(shard)]
            self._write_progress()

    def recorded_shapes(self) -> list:
        """The ``shapes`` recorded with the completed shards (this invocation's and earlier ones'; shards written
        without any, by an older jaxdrive, have none), as written: the caller checks them."""
        return [v["shapes"] for v in self.completed.values() if isinstance(v, dict) and "shapes" in v]

    def owns(self, shard: int) -> bool:
        """Whether this process scores ``shard`` (shards are dealt round-robin over the processes)."""
        return shard % self.process_count == self.process_index

    def _write_progress(self) -> None:
        record = {"version": MANIFEST_VERSION, "identity": self.identity,
                  "completed": dict(sorted(self.mine.items(), key=lambda kv: int(kv[0])))}
        atomic.write_text(self.path / PROGRESS / f"process-{self.process_index}.json", json.dumps(record, indent=1),
                          fsync=True)

    def finish(self) -> None:
        """Multi-process runs: waits until every process has committed its shards, then process 0 writes the one
        manifest (the union of all records) and ``errors.jsonl`` and removes the progress files; returns once the
        manifest is in place. A no-op for one process (the manifest is current after every shard)."""
        if self.process_count == 1:
            return
        from jaxdrive import distributed

        distributed.barrier("scoring shards committed")
        if self.process_index == 0:
            progress = sorted((self.path / PROGRESS).glob("process-*.json"))
            for record in progress:
                self.completed.update(json.loads(record.read_text())["completed"])
            self._write_manifest()
            self._write_errors()
            for record in progress:
                record.unlink()
            (self.path / PROGRESS).rmdir()
        distributed.barrier("scoring manifest written")

    def errors(self) -> list[dict]:
        """Unreadable scenes of every completed shard (this invocation's and earlier ones'), in shard order."""
        return [{"shard": int(k), **e} for k, v in sorted(self.completed.items(), key=lambda kv: int(kv[0]))
                for e in v.get("errors", [])]

    def _write_errors(self) -> None:
        atomic.write_text(self.path / ERRORS, "".join(json.dumps(e) + "\n" for e in self.errors()), fsync=True)

    def shard_files(self) -> list[Path]:
        return [self.path / v["file"] for _, v in sorted(self.completed.items(), key=lambda kv: int(kv[0])) if v["file"]]

    def scored_scene_ids(self) -> set[str]:
        """The scene ids in the completed shards (those of earlier invocations of a resumed run)."""
        return {sid for f in self.shard_files()
                for sid in pq.read_table(f, columns=["scene_id"]).column("scene_id").to_pylist()}


def _file_problem(path: Path, record: dict) -> str | None:
    """What is wrong with a completed shard's file in run directory ``path`` (missing; unreadable: cut short or
    overwritten, its parquet footer does not read; another row count than the record's), or None. Reads the footer
    alone: damage inside a file of the right length goes unseen."""
    name = record["file"]
    if name is None:  # a shard without rows has no file
        return None
    try:
        rows = pq.read_metadata(path / name).num_rows
    except FileNotFoundError:
        return f"{name} is missing"
    except (OSError, pa.ArrowException) as e:
        return f"{name} is unreadable ({e})"
    return None if rows == record["rows"] else f"{name} holds {rows} rows, the manifest {record['rows']}"


def input_record(files: dict[str, list[int] | None]) -> dict:
    """What the manifest keeps of a shard's input files ({file: [size, mtime_ns] or None}): the SHA-256 of their
    canonical JSON and the newest modification time (for messages). Not the table itself: the manifest is rewritten
    after every shard, and 100,000 files' sizes and times took it from 3 to 10 MB (0.06 to 0.45 s per rewrite)."""
    text = json.dumps(files, sort_keys=True, separators=(",", ":"))
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(),
            "newest_ns": max((st[1] for st in files.values() if st is not None), default=0)}


def listed(items: list, shown: int) -> str:
    """The first ``shown`` of ``items`` joined with commas, then "and N more" for the rest (for messages)."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(map(str, items[:shown])) + more


SHOWN_FILES = 3  # changed input files named per shard
SHOWN_SHARDS = 5  # shards scored again named by ``RunDir.say_scored_again``


def _changed_inputs(recorded: dict | None, current: dict[str, list[int] | None]) -> str | None:
    """How a shard's input files ({file: [size, mtime_ns] or None}, now) differ from those it was scored from (its
    ``input_record``), or None. Names the files modified after the newest of those (an edit since the run), else
    says how many files the shard has."""
    if recorded == input_record(current):
        return None
    if recorded is None:
        return "the sizes and times of its input files were not recorded (an earlier jaxdrive wrote it)"
    newer = sorted(f for f, st in current.items() if st is None or st[1] > recorded["newest_ns"])
    which = listed(newer, SHOWN_FILES) if newer else f"one or more of its {len(current)} files"
    return f"its input files changed since it was scored (size or modification time): {which}"


def _completed(path: Path) -> list[tuple[int, dict]]:
    manifest = json.loads((path / MANIFEST).read_text())
    return sorted(((int(k), v) for k, v in manifest["completed"].items()), key=lambda kv: kv[0])


def completed_files(path: str | os.PathLike) -> list[Path]:
    """The shard files the manifest of a run directory names as complete, in shard order."""
    return [Path(path) / v["file"] for _, v in _completed(Path(path)) if v["file"]]


def run_errors(path: str | os.PathLike) -> list[dict]:
    """The unreadable scenes recorded for the completed shards of a run directory (all invocations)."""
    return [{"shard": k, **e} for k, v in _completed(Path(path)) for e in v.get("errors", [])]


def run_scene_ids(path: str | os.PathLike) -> set[str]:
    """The scene ids in the completed shards of a run directory (all invocations)."""
    return {sid for f in completed_files(path)
            for sid in pq.read_table(f, columns=["scene_id"]).column("scene_id").to_pylist()}


def iter_shard_columns(path: str | os.PathLike):
    """Yields each completed shard's rows as a dict of numpy columns (the runner's layout), in shard order."""
    for f in completed_files(path):
        table = pq.read_table(f)
        yield {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def read_results(path: str | os.PathLike):
    """All rows of a run directory as a pandas DataFrame (completed shards, in order)."""
    import pandas as pd

    files = completed_files(path)
    if not files:
        return pd.DataFrame()
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)
