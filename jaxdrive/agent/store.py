"""Long-term memory entries and their persistent store (pickle-free, written atomically).

An entry is the paper's e_i = (c_i, r_i, p_i+, pi_i^tool, w_i): applicable conditions, risk factors, a reusable success
pattern, a tool-use strategy and a retrieval utility; plus identity fields (id, source scene, source trajectories, the
teacher's answer) that the inference-safe view strips.

On disk a store is a directory::

    CURRENT                  one line: the name of the committed generation
    gen-000007/entries.parquet    one row per entry (text fields, utility float64, sources and scenes list<string>)
    gen-000007/embeddings.npy     float32 [N, D] unit-norm rows (numpy format, loaded with allow_pickle=False)
    gen-000007/meta.json          {"dim", "count", "embedder", "consolidated": [trajectory ids], "created"}

``save`` writes a new generation into a temporary directory, fsyncs it, renames it into place, then swaps ``CURRENT``
with ``os.replace`` (atomic on POSIX). A process killed at any point leaves either the old or the new generation
committed, never a mix; leftovers are removed by the next save. The previous generation is kept as a backup.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jaxdrive.errors import UserInputError
from jaxdrive.json_values import is_finite_number

TEXT_FIELDS = ("conditions", "risks", "success_pattern", "tool_strategy")
SAFE_FIELDS = TEXT_FIELDS  # what the policy may see
_COLUMNS = ("id", "scene_id", "kind") + TEXT_FIELDS + ("answer", "utility", "support", "sources", "scenes")
_COLUMN_TYPES = {"utility": pa.float64(), "support": pa.int64(), "sources": pa.list_(pa.string()),
                 "scenes": pa.list_(pa.string())}  # the others are strings
_OPTIONAL_COLUMNS = ("scenes",)  # absent from stores written before it existed: the entry's default


@dataclasses.dataclass
class MemoryEntry:
    """One long-term memory entry. ``kind``: "rule" (driving knowledge) or "experience" (from verified trajectories)."""

    id: str
    conditions: str
    risks: str = ""
    success_pattern: str = ""
    tool_strategy: str = ""
    utility: float = 0.0
    scene_id: str = ""
    kind: str = "experience"
    answer: str = ""
    support: int = 1
    sources: list[str] = dataclasses.field(default_factory=list)
    scenes: list[str] = dataclasses.field(default_factory=list)  # every scene it was abstracted from, besides scene_id

    def scene_set(self) -> set[str]:
        """The scenes this entry came from (``scene_id`` and ``scenes``): a query from any of them must not see it."""
        return {s for s in (self.scene_id, *self.scenes) if s}

    def text(self) -> str:
        """The text that is embedded: the four schema fields (never identity fields or the answer)."""
        return "\n".join(f"{f.replace('_', ' ')}: {getattr(self, f)}" for f in TEXT_FIELDS if getattr(self, f))

    def safe_view(self) -> dict:
        """Inference-safe view: the schema fields only (no id, scene, sources, answer or utility)."""
        return {f: getattr(self, f) for f in SAFE_FIELDS}

    @staticmethod
    def from_dict(d: dict, where: str = "entry") -> "MemoryEntry":
        """An entry from a JSON object; ``ValueError`` naming ``where`` and the field for anything else than
        non-empty ``id`` / ``conditions`` strings, string text fields, ``kind`` rule | experience, a finite number
        ``utility``, an integer ``support`` >= 1 and lists of strings ``sources`` and ``scenes``."""
        if not isinstance(d, dict):
            raise UserInputError(f"{where}: expected a JSON object (one entry), got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(MemoryEntry)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserInputError(f"{where}: unknown field(s) {unknown} (known: {sorted(known)})")
        for f in ("id", "conditions"):
            if not isinstance(d.get(f), str) or not d[f].strip():
                raise UserInputError(f"{where}: field {f!r}: expected a non-empty string, got {d.get(f)!r}")
        _check_fields(d, where)
        e = MemoryEntry(**d)
        e.utility, e.sources, e.scenes = float(e.utility), list(e.sources), list(e.scenes)
        return e


def _check_fields(d: dict, where: str) -> None:
    """The optional fields of an entry dict have their types (see ``MemoryEntry.from_dict``)."""
    for f in TEXT_FIELDS[1:] + ("scene_id", "answer"):
        if not isinstance(d.get(f, ""), str):
            raise UserInputError(f"{where}: field {f!r}: expected a string, got {d[f]!r}")
    if d.get("kind", "experience") not in ("rule", "experience"):
        raise UserInputError(f"{where}: field 'kind': expected 'rule' or 'experience', got {d['kind']!r}")
    u = d.get("utility", 0.0)
    if not is_finite_number(u):
        raise UserInputError(f"{where}: field 'utility': expected a finite number, got {u!r}")
    n = d.get("support", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserInputError(f"{where}: field 'support': expected an integer >= 1, got {n!r}")
    for f in ("sources", "scenes"):
        values = d.get(f, [])
        if not isinstance(values, list) or not all(isinstance(x, str) for x in values):
            raise UserInputError(f"{where}: field {f!r}: expected a list of strings, got {values!r}")


def format_entries(entries: Sequence[MemoryEntry]) -> str:
    """The retrieved entries as prompt text (inference-safe view, one numbered block each)."""
    blocks = []
    for i, e in enumerate(entries, 1):
        v = e.safe_view()
        blocks.append(f"[{i}] " + "; ".join(f"{k.replace('_', ' ')}: {v[k]}" for k in SAFE_FIELDS if v[k]))
    return "\n".join(blocks)


@dataclasses.dataclass
class MemoryStore:
    """Entries with their embeddings [N, D] (row i embeds ``entries[i].text()``) and the ids of the trajectories already
    consolidated into it."""

    entries: list[MemoryEntry]
    embeddings: np.ndarray
    consolidated: list[str] = dataclasses.field(default_factory=list)
    embedder: str = "all-MiniLM-L6-v2"

    def __post_init__(self):
        self.embeddings = np.asarray(self.embeddings, np.float32)
        if self.embeddings.ndim != 2 or self.embeddings.shape[0] != len(self.entries):
            raise UserInputError(f"embeddings: expected [{len(self.entries)}, D] (one row per entry), got "
                             f"{self.embeddings.shape}")
        ids = [e.id for e in self.entries]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise UserInputError(f"entries: ids must be unique, {dup!r} repeats")

    @property
    def utility(self) -> np.ndarray:
        return np.array([e.utility for e in self.entries], np.float64)

    def exclusion(self, query_scenes: Sequence[str]) -> np.ndarray:
        """[Q, N] bool: entry n comes from query q's scene, or was abstracted from experiences that include it (paper
        A.2's same-scene safeguard)."""
        pairs = [(n, s) for n, e in enumerate(self.entries) for s in sorted(e.scene_set())]
        rows = np.array([n for n, _ in pairs], np.int64)
        names = np.array([s for _, s in pairs], dtype=object)
        out = np.zeros((len(query_scenes), len(self.entries)), bool)
        for q, scene in enumerate(query_scenes):
            if scene:
                out[q, rows[names == scene]] = True
        return out


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, write) -> None:
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _table(entries: Sequence[MemoryEntry]) -> pa.Table:
    cols = {c: [getattr(e, c) for e in entries] for c in _COLUMNS}
    schema = pa.schema([(c, _COLUMN_TYPES.get(c, pa.string())) for c in _COLUMNS])
    return pa.table(cols, schema=schema)


_GENERATION = re.compile(r"gen-(\d{6})")


def current_generation(root: Path) -> str | None:
    """The committed generation's name (None when there is no ``CURRENT``); ``ValueError`` when ``CURRENT`` does not
    name a generation (a damaged or foreign file)."""
    try:
        name = (root / "CURRENT").read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise UserInputError(f"memory store {root}: CURRENT is unreadable ({e})") from None
    if not name:
        return None
    if not _GENERATION.fullmatch(name):
        raise UserInputError(f"memory store {root}: CURRENT names {name[:80]!r}, not a generation (gen-NNNNNN)")
    return name


def save(store: MemoryStore, root: str | os.PathLike) -> Path:
    """Write ``store`` as the next generation under ``root`` and commit it atomically; returns the generation dir."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    cur = current_generation(root)
    for p in root.iterdir():  # leftovers of killed writers
        if p.name.startswith(".tmp-"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    number = int(cur.split("-")[1]) + 1 if cur else 1
    while (root / f"gen-{number:06d}").exists():
        number += 1
    name = f"gen-{number:06d}"
    tmp = root / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    _write_file(tmp / "entries.parquet", lambda f: pq.write_table(_table(store.entries), f))
    _write_file(tmp / "embeddings.npy", lambda f: np.save(f, store.embeddings, allow_pickle=False))
    meta = {"dim": int(store.embeddings.shape[1]), "count": len(store.entries), "embedder": store.embedder,
            "consolidated": list(store.consolidated), "created": time.time()}
    _write_file(tmp / "meta.json", lambda f: f.write(json.dumps(meta).encode()))
    _fsync_dir(tmp)
    os.rename(tmp, root / name)
    _fsync_dir(root)
    pointer = root / f".tmp-CURRENT-{uuid.uuid4().hex[:8]}"
    _write_file(pointer, lambda f: f.write(f"{name}\n".encode()))
    os.replace(pointer, root / "CURRENT")  # the commit point
    _fsync_dir(root)
    for p in root.iterdir():  # keep the new generation and the one before it
        if p.name.startswith("gen-") and p.name not in (name, cur):
            shutil.rmtree(p, ignore_errors=True)
    return root / name


def load(root: str | os.PathLike, mmap: bool = False) -> MemoryStore:
    """The committed generation of the store at ``root`` (``mmap``: embeddings memory-mapped, read-only)."""
    root = Path(root)
    cur = current_generation(root)
    if cur is None:
        raise UserInputError(f"memory store {root}: no committed generation (missing CURRENT; build one with "
                         "`jaxdrive memory build`)")
    gen = root / cur
    try:
        meta = json.loads((gen / "meta.json").read_text())
        table = pq.read_table(gen / "entries.parquet")
        emb = np.load(gen / "embeddings.npy", allow_pickle=False, mmap_mode="r" if mmap else None)
    except (OSError, ValueError) as e:
        raise UserInputError(f"memory store {root}: generation {cur} is unreadable ({e})") from None
    where = f"memory store {root}: {cur}"
    if not isinstance(meta, dict) or isinstance(meta.get("count"), bool) or not isinstance(meta.get("count"), int):
        raise UserInputError(f"{where}/meta.json: expected an object with an integer 'count'")
    present = [c for c in _COLUMNS if c in table.column_names]
    missing = [c for c in _COLUMNS if c not in present and c not in _OPTIONAL_COLUMNS]
    if missing:
        raise UserInputError(f"{where}/entries.parquet: missing column(s) {missing}")
    entries = [MemoryEntry(**r) for r in table.select(present).to_pylist()]
    if len(entries) != meta["count"]:
        raise UserInputError(f"{where} holds {len(entries)} entries, meta.json says {meta['count']}")
    try:
        return MemoryStore(entries, emb, list(meta.get("consolidated", [])), meta.get("embedder", ""))
    except ValueError as e:
        raise UserInputError(f"{where}: {e}") from None


def read_entries_jsonl(path: str | os.PathLike) -> list[MemoryEntry]:
    """Entries from a UTF-8 JSONL file (one ``MemoryEntry`` dict per line, each id once; errors name the line)."""
    from jaxdrive.datasets.base import first_use, read_jsonl_file

    out, first = [], {}
    for where, d in read_jsonl_file(Path(path)):
        entry = MemoryEntry.from_dict(d, where)
        first_use(first, entry.id, where)
        out.append(entry)
    return out


def build(entries: Sequence[MemoryEntry], embed) -> MemoryStore:
    """A store of ``entries`` embedded with ``embed`` (texts -> unit rows)."""
    return MemoryStore(list(entries), embed([e.text() for e in entries]))
