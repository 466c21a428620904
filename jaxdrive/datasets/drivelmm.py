"""DriveLMM-o1 (multi-view reasoning VQA with step-by-step rationales) as a TFDS dataset.

Source layout: ``<src>/<split>.json`` (a JSON list) or ``<src>/<split>.jsonl`` (one object per line), items as the
DriveLMM-o1 release writes them::

    {"idx": "<scene token>_<sample token>_<question number>",
     "image": ["samples/CAM_FRONT_LEFT/....jpg", ... six surround views],   # paths relative to <src>
     "question": "...", "final_answer": "...", "steps": "\\n1. ...\\n2. ...",
     "lidar": "....pcd.bin"}                                                 # optional, kept as a name only

(link or copy nuScenes' ``samples/`` under ``<src>`` so the image paths resolve; an absolute or '..' path is an error,
``base.source_path``). Images are stored as the bytes of their files, in the item's camera order.
"""
from __future__ import annotations

from pathlib import Path

from jaxdrive.datasets.base import (Builder, SourceError, blobs, bytes_feature, file_ref, read_json_file,
                                    read_jsonl_file, require, text, texts)

FIELDS = {"idx": str, "image": list, "question": str, "final_answer": str, "steps": str}


def _items(path: Path):
    if path.suffix == ".jsonl":
        yield from read_jsonl_file(path)
        return
    items = read_json_file(path)
    if not isinstance(items, list):
        raise SourceError(f"{path}: expected a JSON list of items, got {type(items).__name__}")
    for i, obj in enumerate(items):
        where = f"{path} item {i}"
        if not isinstance(obj, dict):
            raise SourceError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        yield where, obj


class DriveLMMo1(Builder):
    kind, name = "drivelmm_o1", "jaxdrive_drivelmm_o1"
    description = "DriveLMM-o1 multi-view driving VQA with step-by-step reasoning"

    def features(self):
        import tensorflow_datasets as tfds

        T = tfds.features.Text
        return tfds.features.FeaturesDict({
            "idx": T(), "question": T(), "final_answer": T(), "steps": T(), "lidar": T(),
            "image_paths": tfds.features.Sequence(T()), "images": tfds.features.Sequence(bytes_feature()),
        })

    def split_examples(self, src: Path) -> dict[str, list[dict]]:
        files = sorted(list(src.glob("*.json")) + list(src.glob("*.jsonl")))
        if not files:
            raise SourceError(f"{src}: no <split>.json / <split>.jsonl files (e.g. train.json, test.json)")
        out = {}
        for path in files:
            if path.stem in out:
                raise SourceError(f"{src}: split {path.stem!r} given twice ({path.stem}.json and .jsonl)")
            rows, first = [], {}
            for where, obj in _items(path):
                require(obj, where, FIELDS)
                if obj["idx"] in first:  # an item given twice would be answered and scored twice
                    raise SourceError(f"{where}: field 'idx': {obj['idx']!r} is already the idx of "
                                      f"{first[obj['idx']]} (each once)")
                first[obj["idx"]] = where
                if not obj["image"] or not all(isinstance(p, str) for p in obj["image"]):
                    raise SourceError(f"{where}: field 'image': expected a non-empty list of image paths")
                if "lidar" in obj:
                    require(obj, where, {"lidar": str})
                item = f"{where} (idx {obj['idx']!r})"
                rows.append({"idx": obj["idx"], "question": obj["question"], "final_answer": obj["final_answer"],
                             "steps": obj["steps"], "lidar": obj.get("lidar", ""), "image_paths": obj["image"],
                             "images": [file_ref(src, p, item, "image") for p in obj["image"]]})
            out[path.stem] = rows
        return out

    def decode(self, ex: dict) -> dict:
        """-> ``idx question final_answer steps lidar`` (str; lidar '' when absent), ``image`` (paths) and
        ``image_bytes`` (the files' bytes, same order)."""
        out = {k: text(ex[k]) for k in ("idx", "question", "final_answer", "steps", "lidar")}
        return {**out, "image": texts(ex["image_paths"]), "image_bytes": blobs(ex["images"])}
