"""A DriveJudge data set from a user's labelled scenes: ``jaxdrive judge data --scenes DIR --labels LABELS.jsonl``.

Input: a folder of epdms-scene/1 files (any depth) and a JSON-lines file with one human label per judged proposal,
``{"scene_id": str, "proposal": int, "label": 0 | 1, "challenging": bool (optional)}`` (1 = reasonable driving in
its scene's context; ``../shared/fixtures/drivejudge_labels`` is such a set). Output: the directory of
``judge.dataset`` (records, pairs, scenes, BEV images, meta.json), ready for ``jaxdrive judge baselines``, ``jaxdrive
train sft|grpo`` and ``jaxdrive judge run``:

* the split is by scene (never by proposal): ``test_scenes`` scenes drawn with ``seed`` are held out;
* sub-scores come from jaxdrive's EPDMS kernels (NAVSIM's values; EP normalised over the scene's proposals);
* Eq. 13 thresholds are fitted on the training split's records only (``labels.fit_thresholds``), stored in meta.json
  with their DQC accuracy, and give every record's Eq. 10-11 gate labels;
* pairs for TPS: per scene up to ``pairs_per_scene`` (reasonable, unreasonable) proposal pairs, the unreasonable
  one chosen among those that break no hard rule (NC, DAC, TLC) when the scene has any, so a pair asks what EPDMS
  alone does not answer; A / B order random.

Every label is checked before anything is written (``read_labels``): a scene or proposal that does not exist, a
duplicate, a label that is not 0 / 1, a split that leaves a class empty each stop the run with one line naming it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
from tqdm import tqdm

from jaxdrive import atomic
from jaxdrive.data.scene_json import read_scene
from jaxdrive.errors import UserInputError
from jaxdrive.judge.bev import IMAGE_SIZE, BevConfig, render_bev_batch, render_shape, save_png
from jaxdrive.judge.dataset import SUBSCORE_KEYS, Pair, Record, write_jsonl
from jaxdrive.judge.gates import RULE_LABELS
from jaxdrive.judge.labels import fit_thresholds, gate_labels, rule_values
from jaxdrive.judge.progress import noting_first_compile
from jaxdrive.scene import PadSpec, batch_scenes
from jaxdrive.scorer import BatchScorer

GENERATOR = "jaxdrive.judge.labelled"  # meta.json "generator" of the sets this module writes
HARD = ("nc", "dac", "tlc")  # a trajectory breaking one of these is never reasonable (the labelling guideline)


class LabelError(UserInputError):
    """A label file that does not fit its scenes; the message names the file, the line and the field."""


REPLACED = ("scenes", "images", "baselines", "judge")  # the folders of --out a run removes and writes anew
WRITTEN = ("records.jsonl", "pairs.jsonl", "meta.json")  # and its files


def check_out(out: str | Path, scenes_dir: str | Path, labels_path: str | Path) -> None:
    """A ``LabelError`` when writing the set to ``out`` would remove or replace an input: ``--scenes`` inside a
    folder the run replaces (``out/scenes`` ...) or ``out`` inside ``--scenes`` (or the same folder; a set there
    also holds copies of the scenes, read back as input by the next run), ``--labels`` one of the set's files."""
    o, s, lab = (Path(p).resolve() for p in (out, scenes_dir, labels_path))
    if o.is_relative_to(s) or any(s.is_relative_to(o / sub) for sub in REPLACED):
        raise LabelError(f"--out {out}: writing the set there would remove or re-read the scene files of --scenes "
                         f"{scenes_dir}; choose an --out outside --scenes (and --scenes outside --out's "
                         f"{', '.join(REPLACED)})")
    if any(lab.is_relative_to(o / sub) for sub in REPLACED) or lab in [o / f for f in WRITTEN]:
        raise LabelError(f"--out {out}: writing the set there would remove or replace --labels {labels_path}; "
                         "choose another --out")


def find_scenes(root: str | Path) -> dict[str, Path]:
    """scene id -> file, for every ``*.json`` scene under ``root`` (ids read from the files; a repeated id is an
    error naming both files)."""
    root = Path(root)
    if not root.is_dir():
        raise LabelError(f"--scenes {root}: not a directory")
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.json")):
        try:
            sid = json.loads(path.read_bytes()).get("id")
        except (OSError, ValueError, AttributeError) as e:
            raise LabelError(f"--scenes: {path}: not a scene file ({e})") from None
        if not isinstance(sid, str):
            raise LabelError(f"--scenes: {path}: no string 'id' (not an epdms-scene/1 file)")
        if sid in out:
            raise LabelError(f"--scenes: scene id {sid!r} is in both {out[sid]} and {path}")
        out[sid] = path
    if not out:
        raise LabelError(f"--scenes {root}: no *.json scene files")
    return out


def read_labels(path: str | Path, num_proposals: dict[str, int]) -> dict[tuple[str, int], dict]:
    """(scene id, proposal) -> {"label", "challenging"} from the JSON-lines file ``path``; ``num_proposals``: the
    scenes' proposal counts by id. Raises ``LabelError`` naming the line for a scene or proposal that does not exist,
    a duplicate (with the first line), a label that is not 0 / 1, a missing field or a line that is not JSON."""
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines()  # bytes: str.splitlines would also split at U+2028 etc. in a string
    except OSError as e:
        raise LabelError(f"--labels {path}: cannot read ({e.strerror})") from None
    out: dict[tuple[str, int], dict] = {}
    first_line: dict[tuple[str, int], int] = {}
    for n, raw in enumerate(lines, 1):
        where = f"--labels {path}:{n}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise LabelError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as e:
            raise LabelError(f"{where}: not JSON ({e})") from None
        if not isinstance(item, dict):
            raise LabelError(f"{where}: expected an object with scene_id, proposal, label")
        missing = [k for k in ("scene_id", "proposal", "label") if k not in item]
        if missing:
            raise LabelError(f"{where}: missing field(s) {missing}")
        sid, k, label = item["scene_id"], item["proposal"], item["label"]
        if not isinstance(sid, str) or sid not in num_proposals:
            raise LabelError(f"{where}: scene_id {sid!r} is not a scene of --scenes")
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < num_proposals[sid]:
            raise LabelError(f"{where}: proposal {k!r} is not a proposal of scene {sid!r} "
                             f"(it has {num_proposals[sid]}: 0..{num_proposals[sid] - 1})")
        if isinstance(label, bool) or not isinstance(label, int) or label not in (0, 1):  # 1.0: a score, not a label
            raise LabelError(f"{where}: label {label!r}: expected 0 or 1 (1 = reasonable)")
        challenging = item.get("challenging", False)
        if not isinstance(challenging, bool):
            raise LabelError(f"{where}: challenging {challenging!r}: expected true or false")
        if (sid, k) in out:
            raise LabelError(f"{where}: scene {sid!r} proposal {k} is labelled twice (first on line "
                             f"{first_line[(sid, k)]})")
        out[(sid, k)], first_line[(sid, k)] = {"label": int(label), "challenging": challenging}, n
    if not out:
        raise LabelError(f"--labels {path}: no labels")
    return out


def split_scenes(scene_ids: list[str], test_scenes: int, seed: int) -> tuple[list[str], list[str]]:
    """(train ids, test ids): ``test_scenes`` of the sorted ids held out by a permutation seeded with ``seed``."""
    ids = sorted(scene_ids)
    if not 0 <= test_scenes < len(ids):
        raise LabelError(f"--test-scenes {test_scenes}: expected 0..{len(ids) - 1} (the labelled scenes: {len(ids)})")
    order = np.random.default_rng(seed).permutation(len(ids))
    test = sorted(ids[i] for i in order[:test_scenes])
    held = set(test)
    return [s for s in ids if s not in held], test


def check_classes(labels: dict, split_of: dict[str, str]) -> None:
    """A ``LabelError`` when a split has labels of one class only (AUC, thresholds and pairs need both)."""
    for split in sorted(set(split_of.values())):
        got = {v["label"] for (sid, _), v in labels.items() if split_of[sid] == split}
        if got and got != {0, 1}:
            missing = "reasonable (1)" if 1 not in got else "unreasonable (0)"
            raise LabelError(f"split {split!r}: no {missing} labels; choose another --test-scenes / --seed or "
                             "label more scenes")


def _pairs(rng: np.random.Generator, scene_records: list[Record], per_scene: int) -> list[tuple[Record, Record]]:
    good = [r for r in scene_records if r.label == 1]
    bad = [r for r in scene_records if r.label == 0]
    soft = [r for r in bad if all(r.subscores[m] == 1.0 for m in HARD)]
    bad = soft or bad
    if not good or not bad:
        return []
    combos = [(g, b) for g in good for b in bad]
    pick = rng.permutation(len(combos))[:per_scene]
    return [combos[i] for i in sorted(pick)]


def build_labelled_dataset(out: str | Path, scenes_dir: str | Path, labels_path: str | Path, *, test_scenes: int = 64,
                           seed: int = 0, image_size: int = IMAGE_SIZE, pairs_per_scene: int = 4,
                           batch_size: int = 8, progress: bool = True) -> dict:
    """Writes the data set to ``out`` (module docstring); returns its meta dict. Labels and split are checked before
    anything is written; ``records.jsonl`` is written last (atomically), so an interrupted run leaves no set."""
    check_out(out, scenes_dir, labels_path)
    files = find_scenes(scenes_dir)
    scenes = {sid: read_scene(path) for sid, path in files.items()}
    labels = read_labels(labels_path, {sid: s.num_proposals for sid, s in scenes.items()})
    labelled_ids = sorted({sid for sid, _ in labels})
    train_ids, test_ids = split_scenes(labelled_ids, test_scenes, seed)
    split_of = {**{s: "train" for s in train_ids}, **{s: "test" for s in test_ids}}
    check_classes(labels, split_of)
    out = Path(out)
    (out / "records.jsonl").unlink(missing_ok=True)
    for sub in REPLACED:
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True, exist_ok=True) if sub in ("scenes", "images") else None
    spec = PadSpec.fit([scenes[s] for s in labelled_ids])  # one padded shape for the whole set: one compile
    scorer = BatchScorer()
    values, subs_of = {}, {}
    bar = tqdm(total=len(labelled_ids), desc="judge data (scoring)", disable=not progress)
    for start in noting_first_compile(bar, range(0, len(labelled_ids), batch_size), "the scorer"):
        chunk = [scenes[s] for s in labelled_ids[start:start + batch_size]]
        sc, pr, _ = batch_scenes(chunk + chunk[:1] * (batch_size - len(chunk)), spec)
        subs = scorer(sc, pr)
        vals = np.asarray(rule_values(subs))
        for b, scene in enumerate(chunk):
            values[scene.id] = vals[b, :scene.num_proposals]
            subs_of[scene.id] = {m: np.asarray(getattr(subs, m))[b, :scene.num_proposals] for m in SUBSCORE_KEYS}
        bar.update(len(chunk))
    bar.close()
    keys = sorted(labels)  # (scene id, proposal): scenes in labelled_ids' (sorted) order
    train_keys = [key for key in keys if split_of[key[0]] == "train"]
    fit = fit_thresholds(_subscores_rows(subs_of, train_keys), np.array([labels[k]["label"] for k in train_keys]))
    by_scene: dict[str, list[int]] = {}
    for sid, k in keys:
        by_scene.setdefault(sid, []).append(k)
    records, pairs = [], []
    rng = np.random.default_rng(seed)
    for sid in labelled_ids:
        shutil.copyfile(files[sid], out / "scenes" / f"{sid}.json")
        scene_records = []
        for k in by_scene[sid]:
            s, lab = sid, labels[(sid, k)]
            g = np.asarray(gate_labels(values[s][k], np.array(lab["label"]), fit.thresholds))
            sub = {m: float(subs_of[s][m][k]) for m in SUBSCORE_KEYS}
            sub = {m: (None if np.isnan(v) else v) for m, v in sub.items()}
            rid = f"{sid}_p{k:02d}"
            scene_records.append(Record(id=rid, scene=f"scenes/{sid}.json", proposal=k,
                                        proposal_name=scenes[sid].proposal_names[k], label=lab["label"],
                                        split=split_of[sid], image=f"images/{rid}.png", subscores=sub,
                                        gates={r: int(x) for r, x in zip(RULE_LABELS, g)},
                                        context={"challenging": lab["challenging"]}))
        records += scene_records
        for i, (good, bad) in enumerate(_pairs(rng, scene_records, pairs_per_scene)):
            swap = bool(rng.random() < 0.5)
            ra, rb = (bad, good) if swap else (good, bad)
            pairs.append(Pair(id=f"{sid}_pair{i}", scene=ra.scene, a=ra.proposal, b=rb.proposal,
                              preferred="b" if swap else "a", split=split_of[sid], a_record=ra.id, b_record=rb.id))
    _render(out, records, scenes, spec, image_size, batch_size, progress)
    write_jsonl(out / "pairs.jsonl", pairs)
    meta = {"generator": GENERATOR, "scenes_dir": str(scenes_dir), "labels": str(labels_path), "seed": seed,
            "test_scenes": test_ids, "image_size": image_size, "pairs_per_scene": pairs_per_scene,
            "thresholds": dict(zip(RULE_LABELS, map(float, fit.thresholds))), "threshold_fit": fit.as_dict(),
            "records": {s: sum(r.split == s for r in records) for s in ("train", "test")},
            "scenes": {"train": len(train_ids), "test": len(test_ids)},
            "reasonable_fraction": {s: float(np.mean([r.label for r in records if r.split == s] or [np.nan]))
                                    for s in ("train", "test")},
            "challenging": {s: sum(r.split == s and r.context["challenging"] for r in records)
                            for s in ("train", "test")},
            "pairs": {s: sum(p.split == s for p in pairs) for s in ("train", "test")}}
    atomic.write_text(out / "meta.json", json.dumps(meta, indent=2) + "\n")
    write_jsonl(out / "records.jsonl", records)
    return meta


def _subscores_rows(subs_of: dict, keys: list[tuple[str, int]]):
    """``SubScores`` [N] of the (scene, proposal) ``keys`` (for the threshold fit)."""
    from jaxdrive.judge.baselines import subscores_of

    rows = [Record(id="", scene="", proposal=k, proposal_name="", label=0, split="",
                   subscores={m: float(subs_of[s][m][k]) for m in SUBSCORE_KEYS}) for s, k in keys]
    return subscores_of(rows)


def _render(out: Path, records: list[Record], scenes: dict, spec: PadSpec, image_size: int, batch_size: int,
            progress: bool) -> None:
    """The BEV image of every record, at one ``RenderShape`` for the whole set (a first pass over the batches finds
    it; padding does not change a pixel): one compile."""
    cfg = BevConfig(size=image_size)

    def batches():
        for start in range(0, len(records), batch_size):
            part = records[start:start + batch_size]
            rows = part + part[:1] * (batch_size - len(part))
            sc, pr, _ = batch_scenes([scenes[Path(r.scene).stem] for r in rows], spec, validate=False)
            yield part, sc, np.asarray(pr.states)[np.arange(len(rows)), [r.proposal for r in rows]]

    shape = None
    for _, sc, _ in batches():
        shape = render_shape(sc, cfg) if shape is None else shape.union(render_shape(sc, cfg))
    bar = tqdm(total=len(records), desc="judge data (BEV images)", disable=not progress)
    for part, sc, states in noting_first_compile(bar, batches(), "the BEV renderer"):
        images = np.asarray(render_bev_batch(sc, states, cfg, shape))
        for img, rec in zip(images[:len(part)], part):
            save_png(img, out / rec.image)
        bar.update(len(part))
    bar.close()
