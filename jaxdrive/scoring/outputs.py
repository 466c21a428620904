"""Resumable run directory: parquet shards written atomically, and a manifest naming the completed ones.

Layout of ``OUT``::

    manifest.json            run identity (inputs + options) and the completed shards
    part-00000.parquet ...   one row per proposal of the scenes of shard i
    errors.jsonl             scenes that could not be read (by name), one JSON object per line

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
MANIFEST_VERSION = 1


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
                              if (self.path / v["file"]).exists()}
        for stale in self.path.glob("*.tmp"):
            stale.unlink()
        self._write_manifest()

    def is_done(self, shard: int) -> bool:
        return str(shard) in self.completed

    def _write_manifest(self) -> None:
        manifest = {"version": MANIFEST_VERSION, "identity": self.identity,
                    "completed": dict(sorted(self.completed.items(), key=lambda kv: int(kv[0])))}
        _atomic_write_text(self.path / MANIFEST, json.dumps(manifest, indent=1))

    def write_shard(self, shard: int, columns: dict[str, np.ndarray], errors: list[dict]) -> None:
        """Write one shard's rows atomically and record it as complete."""
        name = shard_name(shard)
        tmp = self.path / (name + ".tmp")
        pq.write_table(pa.table(columns), tmp)
        os.replace(tmp, self.path / name)
        if errors:
            with open(self.path / ERRORS, "a") as f:
                for e in errors:
                    f.write(json.dumps({"shard": shard, **e}) + "\n")
        self.completed[str(shard)] = {"file": name, "rows": int(len(next(iter(columns.values())))) if columns else 0,
                                      "errors": len(errors)}
        self._write_manifest()

    def shard_files(self) -> list[Path]:
        return [self.path / v["file"] for _, v in sorted(self.completed.items(), key=lambda kv: int(kv[0]))]


def read_results(path: str | os.PathLike):
    """All rows of a run directory as a pandas DataFrame (completed shards, in order)."""
    import pandas as pd

    path = Path(path)
    manifest = json.loads((path / MANIFEST).read_text())
    files = [path / v["file"] for _, v in sorted(manifest["completed"].items(), key=lambda kv: int(kv[0]))]
    if not files:
        return pd.DataFrame()
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)
