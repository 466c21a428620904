"""Resumable run directory: parquet shards written atomically, and a manifest naming the completed ones.

Layout of ``OUT``::

    manifest.json            run identity (inputs + options) and the completed shards
    part-00000.parquet ...   one row per proposal of the scenes of shard i
    errors.jsonl             scenes that could not be read (by name), one JSON object per line (the manifest's
                             record of the completed shards' errors, rewritten with it: never duplicated by a resume)

A shard file is written to ``part-i.parquet.tmp`` and renamed into place, then the manifest is rewritten (also via a
temp file). A run killed at any point therefore leaves only complete shard files; on ``--resume`` the shards named in
the manifest are kept, every other shard (even a complete file written just before the kill) is recomputed, so the
union of rows equals an uninterrupted run's, none missing and none duplicated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"
ERRORS = "errors.jsonl"
MANIFEST_VERSION = 2  # 2: per-shard error records in the manifest; shards without rows have no file


class RunDirError(RuntimeError):
    """The output directory cannot be used (unwritable, or holds a different run)."""


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def shard_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


class RunDir:
    """The output directory of one scoring run."""

    def __init__(self, path: str | os.PathLike, identity: dict, *, resume: bool):
        self.path = Path(path)
        self.identity = identity
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write_probe"
            probe.write_text("ok")
            probe.unlink()
        except OSError as e:
            raise RunDirError(f"--out {self.path}: output directory is not writable ({e.strerror})") from None
        manifest_path = self.path / MANIFEST
        self.completed: dict[str, dict] = {}
        if manifest_path.exists():
            if not resume:
                raise RunDirError(f"--out {self.path}: already holds a run ({MANIFEST}); pass --resume to continue it "
                                  f"or choose another output directory")
            try:
                manifest = json.loads(manifest_path.read_text())
            except json.JSONDecodeError as e:
                raise RunDirError(f"{manifest_path}: corrupt manifest ({e})") from None
            old = manifest.get("identity", {})
            if manifest.get("version") != MANIFEST_VERSION or old != identity:
                diff = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
                raise RunDirError(f"{manifest_path}: --resume with different inputs/options than the recorded run "
                                  f"(differs in: {', '.join(diff) or 'version'}); use the same arguments or another --out")
            self.completed = {k: v for k, v in manifest.get("completed", {}).items()
                              if v["file"] is None or (self.path / v["file"]).exists()}
        for stale in self.path.glob("*.tmp"):
            stale.unlink()
        self._write_manifest()
        self._write_errors()

    def is_done(self, shard: int) -> bool:
        return str(shard) in self.completed

    def _write_manifest(self) -> None:
        manifest = {"version": MANIFEST_VERSION, "identity": self.identity,
                    "completed": dict(sorted(self.completed.items(), key=lambda kv: int(kv[0])))}
        _atomic_write_text(self.path / MANIFEST, json.dumps(manifest, indent=1))

    def write_shard(self, shard: int, columns: dict[str, np.ndarray], errors: list[dict]) -> None:
        """Write one shard's rows atomically (no file when it has none) and record it as complete."""
        rows = int(len(next(iter(columns.values())))) if columns else 0
        name = shard_name(shard) if rows else None
        if name:
            tmp = self.path / (name + ".tmp")
            pq.write_table(pa.table(columns), tmp)
            os.replace(tmp, self.path / name)
        self.completed[str(shard)] = {"file": name, "rows": rows, "errors": [dict(e) for e in errors]}
        self._write_manifest()
        self._write_errors()

    def errors(self) -> list[dict]:
        """Unreadable scenes of every completed shard (this invocation's and earlier ones'), in shard order."""
        return [{"shard": int(k), **e} for k, v in sorted(self.completed.items(), key=lambda kv: int(kv[0]))
                for e in v.get("errors", [])]

    def _write_errors(self) -> None:
        _atomic_write_text(self.path / ERRORS, "".join(json.dumps(e) + "\n" for e in self.errors()))

    def shard_files(self) -> list[Path]:
        return [self.path / v["file"] for _, v in sorted(self.completed.items(), key=lambda kv: int(kv[0])) if v["file"]]


def _completed(path: Path) -> list[tuple[int, dict]]:
    manifest = json.loads((path / MANIFEST).read_text())
    return sorted(((int(k), v) for k, v in manifest["completed"].items()), key=lambda kv: kv[0])


def completed_files(path: str | os.PathLike) -> list[Path]:
    """The shard files the manifest of a run directory names as complete, in shard order."""
    return [Path(path) / v["file"] for _, v in _completed(Path(path)) if v["file"]]


def run_errors(path: str | os.PathLike) -> list[dict]:
    """The unreadable scenes recorded for the completed shards of a run directory (all invocations)."""
    return [{"shard": k, **e} for k, v in _completed(Path(path)) for e in v.get("errors", [])]


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
