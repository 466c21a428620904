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

from jaxdrive.judge.gates import RULE_LABELS

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


def _check_record(r: Record, where: str) -> Record:
    if r.label not in (0, 1):
        raise ValueError(f"{where}: label: expected 0 or 1 (1 = reasonable), got {r.label!r}")
    if r.gates and set(r.gates) != set(RULE_LABELS):
        raise ValueError(f"{where}: gates: expected keys {RULE_LABELS}, got {sorted(r.gates)}")
    return r


def _read_jsonl(path: Path, cls, check=None) -> list:
    out = []
    names = {f.name for f in dataclasses.fields(cls)}
    for i, line in enumerate(Path(path).read_text().splitlines()):
        if not line.strip():
            continue
        where = f"{path}:{i + 1}"
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e})") from None
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
        try:
            item = cls(**d)
        except TypeError as e:
            raise ValueError(f"{where}: {e}") from None
        out.append(check(item, where) if check else item)
    return out


def read_records(root: str | Path, split: str | None = None) -> list[Record]:
    """The records of ``root/records.jsonl`` (optionally one split), validated."""
    rows = _read_jsonl(Path(root) / "records.jsonl", Record, _check_record)
    return [r for r in rows if split is None or r.split == split]


def read_pairs(root: str | Path, split: str | None = None) -> list[Pair]:
    def check(p: Pair, where: str) -> Pair:
        if p.preferred not in ("a", "b"):
            raise ValueError(f"{where}: preferred: expected 'a' or 'b', got {p.preferred!r}")
        return p

    path = Path(root) / "pairs.jsonl"
    rows = _read_jsonl(path, Pair, check) if path.exists() else []
    return [p for p in rows if split is None or p.split == split]


def dataset_thresholds(root: str | Path) -> np.ndarray:
    """[7] the gate-label thresholds of ``root/meta.json`` (``RULE_LABELS`` order), or appendix B.1's without one."""
    from jaxdrive.judge.labels import PAPER_THRESHOLDS

    meta = Path(root) / "meta.json"
    saved = json.loads(meta.read_text()).get("thresholds") if meta.exists() else None
    return (np.array([saved[r] for r in RULE_LABELS], np.float32) if saved else PAPER_THRESHOLDS)


def dataset_image_size(root: str | Path) -> int | None:
    """The side (pixels) of the BEV images of ``root`` (``meta.json`` ``image_size``, ``jaxdrive judge data
    --image-size``), or None when the set does not record it."""
    meta = Path(root) / "meta.json"
    size = json.loads(meta.read_text()).get("image_size") if meta.exists() else None
    return None if size is None else int(size)


def write_jsonl(path: str | Path, items) -> Path:
    with open(path, "w") as f:
        for it in items:
            f.write(json.dumps(dataclasses.asdict(it), sort_keys=True) + "\n")
    return Path(path)
