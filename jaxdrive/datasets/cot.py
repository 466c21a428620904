"""OpenREAD-style chain-of-thought records (``jaxdrive.data.openread_cot``) as TFDS datasets, from three layouts:

* ``openread_cot``: ``<src>/<split>.jsonl``, one CoT record per line (``id``, ``task``, ``question``, ``think``,
  ``answer``; optional ``images`` (paths relative to ``src``), ``trajectory`` ([6, 2], required for planning),
  ``references``; any other field is kept in ``extra``). ``target`` is (re)built as ``format_cot(think, answer)``.
* ``omnidrive``: OmniDrive-nuScenes' ``<src>/{vqa,conv}/<split>/<token>.json`` QA lists (``load_omnidrive``).
* ``lingoqa``: LingoQA's parquet layout (``load_lingoqa``): ``action/`` and ``scenery/`` -> split ``train``,
  ``evaluation/`` -> split ``val``.

All three share one feature set; images are stored as the bytes of their files. Image paths are relative to ``src``
and inside it (``base.source_path``: an absolute or '..' path is an error naming the file and the record or row).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from jaxdrive.datasets.base import (Builder, SourceError, blobs, bytes_feature, file_ref, first_use,
                                    read_jsonl_file, require, text, texts)
from jaxdrive.json_values import is_finite_number

TASKS = ("knowledge", "planning", "counterfactual")
_CORE = ("id", "task", "question", "think", "answer", "target", "images", "trajectory", "references")


def _example(rec: dict, root: Path, where: str) -> dict:
    """The stored example of a CoT record (``images`` paths relative to ``root``)."""
    traj = rec.get("trajectory")
    try:
        with np.errstate(over="ignore"):  # a value beyond float32 becomes inf, refused below
            traj = np.zeros((0, 2), np.float32) if traj is None else np.asarray(traj, np.float32)
    except (TypeError, ValueError):
        raise SourceError(f"{where}: field 'trajectory': expected [N, 2] numbers, got {traj!r:.80}") from None
    if traj.ndim != 2 or traj.shape[1] != 2:
        raise SourceError(f"{where}: field 'trajectory': expected [N, 2] points, got shape {traj.shape}")
    if not np.isfinite(traj).all():  # JSON's NaN / Infinity extensions, or a value beyond float32
        raise SourceError(f"{where}: field 'trajectory': expected finite numbers, got {traj.tolist()!r:.80}")
    refs = rec.get("references") or []
    if not all(isinstance(r, str) for r in refs):
        raise SourceError(f"{where}: field 'references': expected a list of strings, got {refs!r:.80}")
    paths = [str(p) for p in rec.get("images") or []]
    return {"id": rec["id"], "task": rec["task"], "question": rec["question"], "think": rec["think"],
            "answer": rec["answer"], "target": rec["target"], "image_paths": paths,
            "images": [file_ref(root, p, where, "images") for p in paths], "trajectory": traj,
            "references": list(refs),
            "extra": json.dumps({k: v for k, v in rec.items() if k not in _CORE}, sort_keys=True)}


class CotBuilder(Builder):
    """Shared features and decoding of the CoT layouts."""

    def features(self):
        import tensorflow_datasets as tfds

        T = tfds.features.Text
        return tfds.features.FeaturesDict({
            "id": T(), "task": T(), "question": T(), "think": T(), "answer": T(), "target": T(),
            "image_paths": tfds.features.Sequence(T()), "images": tfds.features.Sequence(bytes_feature()),
            "trajectory": tfds.features.Tensor(shape=(None, 2), dtype=np.float32,
                                               encoding=tfds.features.Encoding.BYTES),
            "references": tfds.features.Sequence(T()), "extra": T(),
        })

    def decode(self, ex: dict) -> dict:
        """-> a CoT record: ``id task question think answer target`` (str), ``images`` (paths), ``image_bytes``,
        ``trajectory`` (float32 [N, 2]; N = 0 when the record has none), ``references`` and the ``extra`` fields."""
        out = {k: text(ex[k]) for k in ("id", "task", "question", "think", "answer", "target")}
        out.update(images=texts(ex["image_paths"]), image_bytes=blobs(ex["images"]),
                   trajectory=np.asarray(ex["trajectory"], np.float32), references=texts(ex["references"]))
        return {**json.loads(text(ex["extra"])), **out}


class OpenReadCot(CotBuilder):
    kind, name = "openread_cot", "jaxdrive_openread_cot"
    description = "OpenREAD-style <think>/<answer> chain-of-thought records"

    def split_examples(self, src: Path) -> dict[str, list[dict]]:
        from jaxdrive.data.openread_cot import record
        from jaxdrive.eval.trajectory_text import NUM_POINTS

        files = sorted(src.glob("*.jsonl"))
        if not files:
            raise SourceError(f"{src}: no <split>.jsonl files (e.g. train.jsonl)")
        out = {}
        for path in files:
            rows, first = [], {}
            for where, obj in read_jsonl_file(path):
                require(obj, where, {k: str for k in ("id", "task", "question", "think", "answer")})
                first_use(first, obj["id"], where)  # a record given twice would be trained on twice
                if obj["task"] not in TASKS:
                    raise SourceError(f"{where}: field 'task': expected one of {TASKS}, got {obj['task']!r}")
                if obj["task"] == "planning" and obj.get("trajectory") is None:
                    raise SourceError(f"{where}: missing field 'trajectory' (required for a planning record)")
                require(obj, where, {k: list for k in ("images", "references") if k in obj})
                traj = obj.get("trajectory")
                if traj is not None and not (isinstance(traj, list) and all(
                        isinstance(p, list) and all(is_finite_number(v) for v in p) for p in traj)):
                    raise SourceError(f"{where}: field 'trajectory': expected finite numbers ([N, 2] JSON numbers, "
                                      f"not strings, booleans, NaN or Infinity), got {traj!r:.80}")
                extra = {k: v for k, v in obj.items()  # a given "target" is rebuilt from think and answer
                         if k not in ("id", "task", "question", "think", "answer", "target")}
                try:
                    rec = record(obj["task"], obj["question"], obj["think"], obj["answer"], obj["id"], **extra)
                except ValueError as e:  # tags inside think / answer
                    raise SourceError(f"{where}: {e}") from None
                row = _example(rec, src, f"{where} (id {obj['id']!r})")
                if obj["task"] == "planning" and row["trajectory"].shape != (NUM_POINTS, 2):
                    raise SourceError(f"{where}: field 'trajectory': a planning record needs [{NUM_POINTS}, 2] points, "
                                      f"got shape {row['trajectory'].shape}")
                rows.append(row)
            out[path.stem] = rows
        return out


class OmniDrive(CotBuilder):
    kind, name = "omnidrive", "jaxdrive_omnidrive"
    description = "OmniDrive-nuScenes QA as chain-of-thought records"

    def split_examples(self, src: Path) -> dict[str, list[dict]]:
        from jaxdrive.data.openread_cot import load_omnidrive

        kinds = ("vqa", "conv")
        splits = sorted({d.name for k in kinds if (src / k).is_dir() for d in (src / k).iterdir() if d.is_dir()})
        if not splits:
            raise SourceError(f"{src}: no {{vqa,conv}}/<split>/ directories (OmniDrive layout)")
        return {s: [_example(r, src, r["id"]) for r in load_omnidrive(src, s, kinds)] for s in splits}


class LingoQA(CotBuilder):
    kind, name = "lingoqa", "jaxdrive_lingoqa"
    description = "LingoQA question answering as chain-of-thought (knowledge) records"

    def split_examples(self, src: Path) -> dict[str, list[dict]]:
        from jaxdrive.data.openread_cot import lingoqa_files, lingoqa_split, load_lingoqa_file

        try:
            files = {path: load_lingoqa_file(path, src) for path in lingoqa_files(src)}
        except ValueError as e:
            raise SourceError(str(e)) from None
        out = {}
        for path, recs in files.items():
            for rec in recs:
                rec["images"] = [str(Path(p).relative_to(src)) for p in rec["images"]]
                out.setdefault(lingoqa_split(path), []).append(_example(rec, src, f"{path} record {rec['id']!r}"))
        return dict(sorted(out.items()))
