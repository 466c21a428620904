"""DriveJudge-style records and DriveCritic-style preference pairs as TFDS datasets.

Source: a DriveJudge dataset directory (docs/drivejudge-data.md; ``jaxdrive judge data`` writes one):
``records.jsonl`` / ``pairs.jsonl`` (read and validated by ``jaxdrive.judge.dataset``), the scene files they name and
the BEV images. One TFDS split per value of the records' ``split`` field. Every example carries its scene file's bytes
(``scene_json``) and its images' bytes, so a built dataset stands alone. ``subscores``, ``gates`` and ``context`` are
stored as JSON text (``sort_keys``) and decoded back into dicts.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from jaxdrive.datasets.base import Builder, SourceError, blobs, bytes_feature, file_ref, text, texts


class _Scenes:
    """Scene files of a source directory, each read once for its proposal names."""

    def __init__(self, root: Path):
        self.root, self._cache = root, {}

    def get(self, rel: str, where: str) -> tuple[Path, list[str]]:
        if rel not in self._cache:
            path = file_ref(self.root, rel, where, "scene")
            try:
                names = [str(p["name"]) for p in json.loads(path.read_bytes())["proposals"]]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise SourceError(f"{self.root / rel}: not an epdms-scene/1 file with named proposals "
                                  f"({e!r})") from None
            self._cache[rel] = (path, names)
        return self._cache[rel]

    def check_proposal(self, rel: str, k: int, where: str, field: str) -> None:
        names = self.get(rel, where)[1]
        if not 0 <= k < len(names):
            raise SourceError(f"{where}: field {field!r}: proposal {k} out of range (scene {rel} has {len(names)})")


def _by_split(items: list) -> dict[str, list]:
    out = defaultdict(list)
    for it in items:
        out[it.split].append(it)
    return dict(sorted(out.items()))


def _dump(d: dict) -> str:
    return json.dumps(d, sort_keys=True)


def _int(x) -> int:
    return int(np.asarray(x))


class DriveJudgeRecords(Builder):
    """``records.jsonl``: one judged trajectory per example (label 1 = reasonable driving)."""

    kind, name = "drivejudge", "jaxdrive_drivejudge"
    description = "DriveJudge-style human-labelled trajectories with BEV images and their scenes"

    def features(self):
        import tensorflow_datasets as tfds

        T = tfds.features.Text
        i32 = lambda: tfds.features.Scalar(dtype=np.int32)
        return tfds.features.FeaturesDict({
            "id": T(), "scene": T(), "scene_json": bytes_feature(), "proposal": i32(), "proposal_name": T(),
            "label": i32(), "image": T(), "image_bytes": bytes_feature(), "justification": T(),
            "subscores": T(), "gates": T(), "context": T(),
        })

    def split_examples(self, src: Path) -> dict[str, list[dict]]:
        from jaxdrive.judge.dataset import read_records

        path = src / "records.jsonl"
        if not path.is_file():
            raise SourceError(f"{path}: file not found (a DriveJudge directory holds records.jsonl)")
        scenes = _Scenes(src)
        out = {}
        for split, recs in _by_split(read_records(src)).items():
            rows = []
            for r in recs:
                where = f"{path} record {r.id!r}"
                scene_path, names = scenes.get(r.scene, where)
                scenes.check_proposal(r.scene, r.proposal, where, "proposal")
                if names[r.proposal] != r.proposal_name:
                    raise SourceError(f"{where}: field 'proposal_name': {r.proposal_name!r} but proposal "
                                      f"{r.proposal} of {r.scene} is {names[r.proposal]!r}")
                rows.append({
                    "id": r.id, "scene": r.scene, "scene_json": scene_path, "proposal": r.proposal,
                    "proposal_name": r.proposal_name, "label": r.label, "image": r.image,
                    "image_bytes": file_ref(src, r.image, where, "image") if r.image else b"",
                    "justification": r.justification, "subscores": _dump(r.subscores), "gates": _dump(r.gates),
                    "context": _dump(r.context)})
            out[split] = rows
        return out

    def decode(self, ex: dict) -> dict:
        """-> a dict of the ``jaxdrive.judge.dataset.Record`` fields but ``split`` (that is the TFDS split), plus
        ``scene_json`` (the scene file's bytes) and ``image_bytes`` (the BEV image's; empty without an image)."""
        return {"id": text(ex["id"]), "scene": text(ex["scene"]), "proposal": _int(ex["proposal"]),
                "proposal_name": text(ex["proposal_name"]), "label": _int(ex["label"]),
                "image": text(ex["image"]), "justification": text(ex["justification"]),
                "subscores": json.loads(text(ex["subscores"])), "gates": json.loads(text(ex["gates"])),
                "context": json.loads(text(ex["context"])), "scene_json": bytes(ex["scene_json"]),
                "image_bytes": bytes(ex["image_bytes"])}


class DriveCriticPairs(Builder):
    """``pairs.jsonl``: two trajectories of one scene and the human preference. ``images`` holds the BEV images of
    A and B (from their records' ``image`` when ``a_record`` / ``b_record`` name records; empty bytes otherwise)."""

    kind, name = "drivecritic", "jaxdrive_drivecritic"
    description = "DriveCritic-style preference pairs of trajectories with their scenes and BEV images"

    def features(self):
        import tensorflow_datasets as tfds

        T = tfds.features.Text
        i32 = lambda: tfds.features.Scalar(dtype=np.int32)
        return tfds.features.FeaturesDict({
            "id": T(), "scene": T(), "scene_json": bytes_feature(), "a": i32(), "b": i32(), "preferred": T(),
            "a_record": T(), "b_record": T(), "justification": T(),
            "image_paths": tfds.features.Sequence(T()), "images": tfds.features.Sequence(bytes_feature()),
        })

    def split_examples(self, src: Path) -> dict[str, list[dict]]:
        from jaxdrive.judge.dataset import read_pairs, read_records

        path = src / "pairs.jsonl"
        if not path.is_file():
            raise SourceError(f"{path}: file not found (DriveCritic pairs live in pairs.jsonl)")
        records = ({r.id: r for r in read_records(src)} if (src / "records.jsonl").is_file() else {})
        scenes = _Scenes(src)
        out = {}
        for split, pairs in _by_split(read_pairs(src)).items():
            rows = []
            for p in pairs:
                where = f"{path} pair {p.id!r}"
                scene_path, _ = scenes.get(p.scene, where)
                paths, images = [], []
                for side, k, rid in (("a", p.a, p.a_record), ("b", p.b, p.b_record)):
                    scenes.check_proposal(p.scene, k, where, side)
                    rec = records.get(rid) if rid else None
                    if rid and rec is None:
                        raise SourceError(f"{where}: field '{side}_record': record {rid!r} not in records.jsonl")
                    if rec is not None and (rec.scene, rec.proposal) != (p.scene, k):
                        raise SourceError(f"{where}: field '{side}_record': record {rid!r} is proposal "
                                          f"{rec.proposal} of {rec.scene}, not {k} of {p.scene}")
                    image = rec.image if rec is not None else ""
                    paths.append(image)
                    images.append(file_ref(src, image, f"{src / 'records.jsonl'} record {rid!r} ({side} of {where})",
                                           "image") if image else b"")
                rows.append({"id": p.id, "scene": p.scene, "scene_json": scene_path, "a": p.a, "b": p.b,
                             "preferred": p.preferred, "a_record": p.a_record, "b_record": p.b_record,
                             "justification": p.justification, "image_paths": paths, "images": images})
            out[split] = rows
        return out

    def decode(self, ex: dict) -> dict:
        """-> a dict of the ``jaxdrive.judge.dataset.Pair`` fields but ``split``, plus ``scene_json``, ``image_paths``
        and ``images`` (A's and B's)."""
        return {"id": text(ex["id"]), "scene": text(ex["scene"]), "a": _int(ex["a"]), "b": _int(ex["b"]),
                "preferred": text(ex["preferred"]), "a_record": text(ex["a_record"]),
                "b_record": text(ex["b_record"]), "justification": text(ex["justification"]),
                "scene_json": bytes(ex["scene_json"]), "image_paths": texts(ex["image_paths"]),
                "images": blobs(ex["images"])}

