"""DriveJudge-style labelled records and DriveCritic-style preference pairs on disk (format: docs/drivejudge-data.md).

A dataset directory holds

    scenes/<scene_id>.json   epdms-scene/1 scenes (map, agents, ego history, the candidate trajectories)
    images/<record_id>.png   the BEV image of the record's trajectory (``judge.bev``)
    records.jsonl            one DriveJudge record per line (``Record``)
    pairs.jsonl              one DriveCritic pair per line (``Pair``), optional
    meta.json                how the set was made (generator, seeds, thresholds, counts)

A trajectory is a proposal of its scene file, named by index (``proposal``) and name (checked on load).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.judge.gates import RULE_LABELS
from jaxdrive.json_values import is_finite_number

SUBSCORE_KEYS = ("nc", "dac", "ddc", "tlc", "ep", "ttc", "lk", "hc", "ec", "epdms")


@dataclasses.dataclass
class Record:
    """One judged trajectory: the scene file, the proposal, the human label (1 = reasonable driving) and justification;
    the rule sub-scores (EP normalised over the scene's proposals; EC null when undefined), the Eq. 10-11 gate labels
    (``RULE_LABELS`` order) and free context (``context``: e.g. the planted rule that decided the label)."""

    id: str
    scene: str
    proposal: int
    proposal_name: str
    label: int
    split: str
    image: str = ""
    justification: str = ""
    subscores: dict = dataclasses.field(default_factory=dict)
    gates: dict = dataclasses.field(default_factory=dict)
    context: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Pair:
    """Two trajectories of one scene and the human preference ("a" or "b")."""

    id: str
    scene: str
    a: int
    b: int
    preferred: str
    split: str
    a_record: str = ""
    b_record: str = ""
    justification: str = ""


def _is_index(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_text(item, fields: tuple[str, ...], where: str) -> None:
    for f in fields:
        v = getattr(item, f)
        if not isinstance(v, str):
            raise UserInputError(f"{where}: {f}: expected a string, got {v!r}")
    if not item.id:
        raise UserInputError(f"{where}: id: expected a non-empty string")


def _check_record(r: Record, where: str) -> Record:
    _check_text(r, ("id", "scene", "proposal_name", "split", "image", "justification"), where)
    if not _is_index(r.proposal):
        raise UserInputError(f"{where}: proposal: expected a proposal index (an integer >= 0), got {r.proposal!r}")
    if isinstance(r.label, bool) or r.label not in (0, 1):
        raise UserInputError(f"{where}: label: expected 0 or 1 (1 = reasonable), got {r.label!r}")
    for f in ("subscores", "gates", "context"):
        if not isinstance(getattr(r, f), dict):
            raise UserInputError(f"{where}: {f}: expected a JSON object, got {getattr(r, f)!r}")
    for k, v in r.subscores.items():
        if k not in SUBSCORE_KEYS:
            raise UserInputError(f"{where}: subscores: unknown key {k!r} (expected some of {SUBSCORE_KEYS})")
        if v is not None and not is_finite_number(v):
            raise UserInputError(f"{where}: subscores: {k}: expected a finite number or null, got {v!r}")
        if v is not None and not 0.0 <= v <= 1.0:  # e.g. percent: gated scores of 1e8 before, without a word
            raise UserInputError(f"{where}: subscores: {k}: expected a score in [0, 1], got {v!r}")
    if r.gates and set(r.gates) != set(RULE_LABELS):
        raise UserInputError(f"{where}: gates: expected keys {RULE_LABELS}, got {sorted(r.gates)}")
    for k, v in r.gates.items():
        if isinstance(v, str) or v not in (0, 1):
            raise UserInputError(f"{where}: gates: {k}: expected 0 or 1 (1 = rule invoked), got {v!r}")
    return r


def _check_pair(p: Pair, where: str) -> Pair:
    _check_text(p, ("id", "scene", "split", "a_record", "b_record", "justification"), where)
    for f in ("a", "b"):
        if not _is_index(getattr(p, f)):
            raise UserInputError(f"{where}: {f}: expected a proposal index (an integer >= 0), got {getattr(p, f)!r}")
    if p.preferred not in ("a", "b"):
        raise UserInputError(f"{where}: preferred: expected 'a' or 'b', got {p.preferred!r}")
    return p


def _read_jsonl(path: Path, cls, check) -> list:
    """The items of a JSON-lines file (UTF-8, one object per line), each checked; ids are unique (an error names
    both lines)."""
    from jaxdrive.datasets.base import first_use, read_jsonl_file

    out, lines = [], {}
    names = {f.name for f in dataclasses.fields(cls)}
    for where, d in read_jsonl_file(Path(path)):
        unknown = set(d) - names
        if unknown:
            raise UserInputError(f"{where}: unknown field(s) {sorted(unknown)}")
        try:
            item = cls(**d)
        except TypeError as e:
            raise UserInputError(f"{where}: {e}") from None
        out.append(check(item, where))
        first_use(lines, item.id, where)
    return out


def read_records(root: str | Path, split: str | None = None) -> list[Record]:
    """The records of ``root/records.jsonl`` (optionally one split), validated; a ValueError naming the file when
    there is none (a FileNotFoundError traceback before, e.g. ``jaxdrive train`` with a wrong ``data.path``)."""
    path = Path(root) / "records.jsonl"
    if not path.is_file():
        raise UserInputError(f"{path}: no such file (a DriveJudge set holds one: `jaxdrive judge data --out DIR`)")
    rows = _read_jsonl(path, Record, _check_record)
    return [r for r in rows if split is None or r.split == split]


def read_pairs(root: str | Path, split: str | None = None) -> list[Pair]:
    """The pairs of ``root/pairs.jsonl`` (optionally one split), validated; none without the file."""
    path = Path(root) / "pairs.jsonl"
    rows = _read_jsonl(path, Pair, _check_pair) if path.exists() else []
    return [p for p in rows if split is None or p.split == split]


def read_meta(root: str | Path) -> dict:
    """``root/meta.json`` as a dict ({} without one); fails naming the file when it is not a JSON object."""
    path = Path(root) / "meta.json"
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserInputError(f"{path}: cannot read JSON ({e})") from None
    if not isinstance(meta, dict):
        raise UserInputError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    return meta


def dataset_thresholds(root: str | Path) -> np.ndarray:
    """[7] the gate-label thresholds of ``root/meta.json`` (``RULE_LABELS`` order), or appendix B.1's without one."""
    from jaxdrive.judge.labels import PAPER_THRESHOLDS

    saved = read_meta(root).get("thresholds")
    if not saved:
        return PAPER_THRESHOLDS
    if not isinstance(saved, dict) or set(saved) != set(RULE_LABELS) or not all(
            is_finite_number(v) and abs(v) <= np.finfo(np.float32).max for v in saved.values()):
        raise UserInputError(f"{Path(root) / 'meta.json'}: thresholds: expected a finite number for each of "
                         f"{RULE_LABELS}, got {saved!r:.200}")
    return np.array([saved[r] for r in RULE_LABELS], np.float32)


def dataset_image_size(root: str | Path) -> int | None:
    """The side (pixels) of the BEV images of ``root`` (``meta.json`` ``image_size``, ``jaxdrive judge data
    --image-size``), or None when the set does not record it."""
    size = read_meta(root).get("image_size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise UserInputError(f"{Path(root) / 'meta.json'}: image_size: expected a positive integer (pixels), got {size!r}")
    return size


def item_name(root: str | Path, item) -> str:
    """How messages name a record or a pair of the set ``root``: "ROOT/records.jsonl record 'ID'" or
    "ROOT/pairs.jsonl pair 'ID'"."""
    return (f"{Path(root) / 'records.jsonl'} record {item.id!r}" if isinstance(item, Record) else
            f"{Path(root) / 'pairs.jsonl'} pair {item.id!r}")


def record_images(root: str | Path, records: list[Record]) -> dict[str, Path]:
    """{record id: its BEV image file}, each checked (``datasets.base.file_ref``: the converters' path rule, the file
    exists) before anything reads them; fails naming the record."""
    from jaxdrive.datasets.base import file_ref

    return {r.id: file_ref(Path(root), r.image, item_name(root, r), "image") for r in records}


def read_image(path: Path, where: str) -> np.ndarray:
    """[H, W, 3] uint8 RGB pixels of the image file ``path`` (a record's ``image``, named ``where``: ``item_name``);
    a ValueError naming the record, the field and the file when it is not a readable image (not an image, a PNG
    cut short: PIL's OSError before, a traceback naming no record)."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"))
    except OSError as e:
        raise UserInputError(f"{where}: field 'image': {path}: not a readable image ({e})") from None


def read_scenes(root: str | Path, items: list) -> dict:
    """{scene path: ``HostScene``} of the scene files that ``items`` (records or pairs of ``root``) name, each read
    once; checks every item's ``scene`` path (relative to ``root``, without '..': ``datasets.base.source_path``, the
    rule of the dataset converters), that the file reads, that its proposal indices (a record's ``proposal``, a
    pair's ``a`` and ``b``) are in range, and a record's ``proposal_name``; a record's ``image`` path, when given,
    follows the same path rule (the report embeds it). Fails naming the file, item and field."""
    from jaxdrive.data.scene_json import read_scene
    from jaxdrive.datasets.base import source_path

    root, scenes = Path(root), {}
    for it in items:
        is_record, named = isinstance(it, Record), item_name(root, it)
        if is_record and it.image:
            source_path(root, it.image, named, "image")
        if it.scene not in scenes:
            path = source_path(root, it.scene, named, "scene")
            try:
                scenes[it.scene] = read_scene(path, validate=False)
            except ValueError as e:
                raise UserInputError(f"{named}: field 'scene': {e}") from None
        names = scenes[it.scene].proposal_names
        for field in ("proposal",) if is_record else ("a", "b"):
            k = getattr(it, field)
            if k >= len(names):
                raise UserInputError(f"{named}: field {field!r}: proposal {k} out of range (scene {it.scene} has "
                                 f"{len(names)})")
        if is_record and names[it.proposal] != it.proposal_name:
            raise UserInputError(f"{named}: field 'proposal_name': {it.proposal_name!r} but proposal {it.proposal} of "
                             f"{it.scene} is {names[it.proposal]!r}")
    return scenes


def check_pair_records(root: str | Path, pairs: list[Pair], records: list[Record]) -> None:
    """Each pair's ``a_record`` / ``b_record``, when given, is the id of a record (any split) of the pair's scene
    and trajectory (``a`` / ``b``); fails naming the pair and the field (a pair naming no record was silently left
    out of the record-based scores)."""
    by_id = {r.id: r for r in records}
    for p in pairs:
        for field, k in (("a_record", p.a), ("b_record", p.b)):
            rid = getattr(p, field)
            if not rid:
                continue
            named = f"{item_name(root, p)}: field {field!r}"
            r = by_id.get(rid)
            if r is None:
                raise UserInputError(f"{named}: no record {rid!r} in records.jsonl")
            if (r.scene, r.proposal, r.split) != (p.scene, k, p.split):
                raise UserInputError(f"{named}: record {rid!r} is proposal {r.proposal} of {r.scene} ({r.split}), the "
                                 f"pair's is proposal {k} of {p.scene} ({p.split})")


def write_jsonl(path: str | Path, items) -> Path:
    """``items`` (records or pairs) as JSON lines, replacing ``path`` atomically (``atomic.replacing``: a writer
    killed midway leaves the previous file, never a shorter one that may end on a line boundary)."""
    from jaxdrive.atomic import replacing

    with replacing(path) as tmp, open(tmp, "w") as f:
        for it in items:
            f.write(json.dumps(dataclasses.asdict(it), sort_keys=True) + "\n")
    return Path(path)
