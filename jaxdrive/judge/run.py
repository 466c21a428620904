"""``jaxdrive judge run``: a DriveJudge model over a dataset's records and pairs, written as ``jaxdrive eval``
prediction files (and optionally the HTML audit report).

Outputs in ``--out``: ``dqc.parquet`` (id, score = expected gated score, label, score_hard, epdms, p_<RULE>...,
rationale) and, when the split has pairs whose trajectories are records, ``tps.parquet`` (id, score_a, score_b,
preferred), and, when the records have gate labels, ``gates.json``. A run first removes these files of an earlier run
there and what ``jaxdrive eval`` wrote beside them (``eval.cli.metric_files``: ``dqc.dqc.json``, ...), so what
``--out`` holds is always one run's (never a previous model's ``tps.parquet`` beside this one's ``dqc.parquet``, nor
its metrics), and writes each atomically.

Nothing judged is lost on interruption: each judged batch is committed as it finishes, a parquet part written
atomically under ``--out``'s ``partial/`` (a ``scoring.outputs.RunDir``: part i = batch i, its manifest records the
run's identity, ``run_identity``). Ctrl-C ends with exit 130 and says how many records are kept; the same command
plus ``--resume`` judges only the batches not yet committed, and refuses (a usage error naming what differs) when the
model directory (its files' names, sizes and times), the data, the split's records, ``--limit``, ``--batch-size`` or
the judge's settings changed. Without ``--resume`` an earlier run's parts are removed. The outputs are written from
the parts, so they equal an uninterrupted run's, and ``partial/`` is removed once they are.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from jaxdrive import atomic
from jaxdrive.data.synthetic import pad_spec
from jaxdrive.errors import UserInputError
from jaxdrive.eval.cli import metric_files
from jaxdrive.judge.bev import BevConfig
from jaxdrive.judge.dataset import check_pair_records, dataset_image_size, dataset_thresholds, read_pairs, \
    read_records, read_scenes
from jaxdrive.judge.gates import RULE_LABELS
from jaxdrive.judge.progress import noting_first_compile
from jaxdrive.output_paths import output_dir, output_file


def _judged(judge, scenes: dict, part: list, chunk: int) -> dict:
    """Columns {id, score, score_hard, epdms, label, rationale, p_<RULE>} of one batch of records (padded to ``chunk``
    with its first: one compile)."""
    padded = part + part[:1] * (chunk - len(part))
    out = judge.score([scenes[r.scene] for r in padded], [r.proposal for r in padded])
    n = len(part)
    cols = {"id": [r.id for r in part], "score": out.score[:n].tolist(), "score_hard": out.score_hard[:n].tolist(),
            "epdms": out.epdms[:n].tolist(), "label": [r.label for r in part], "rationale": list(out.rationale[:n])}
    cols.update({f"p_{r}": out.probs[:n, j].tolist() for j, r in enumerate(RULE_LABELS)})
    return cols


def judge_records(judge, scenes: dict, records, chunk: int = 8, progress: bool = True, parts=None) -> dict:
    """Runs ``judge.score`` over the records (their scenes: ``dataset.read_scenes``) in fixed-size chunks (the last
    one padded: one compile); returns columns {id, score, score_hard, epdms, label, rationale, p_<RULE>}. With
    ``parts`` (a ``RunDir``), chunk i is committed there as part i when judged, the parts it holds already are not
    judged again (the bar starts at their records), and the columns are read back from all parts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    todo = [i for i in range(-(-len(records) // chunk)) if parts is None or not parts.is_done(i)]
    judged = []  # without parts: each chunk's table
    kept = len(records) - sum(len(records[i * chunk:(i + 1) * chunk]) for i in todo)
    with tqdm(total=len(records), initial=kept, desc="judge", disable=not progress) as bar:
        for i in noting_first_compile(bar, todo, "the scorer and the judge"):
            cols = _judged(judge, scenes, records[i * chunk:(i + 1) * chunk], chunk)
            if parts is None:
                judged.append(pa.table(cols))
            else:
                parts.write_shard(i, cols, [])
            bar.update(len(cols["id"]))
    return pa.concat_tables(judged if parts is None else [pq.read_table(f) for f in parts.shard_files()]).to_pydict()


def gate_match(records, cols: dict, train_records) -> dict:
    """Gate prediction quality (percent) against the records' Eq. 10-11 labels: perfect match (all seven gates right,
    paper D.2), per-rule accuracy, and the majority baseline (the most common training gate vector predicted for
    every record)."""
    truth = np.array([[r.gates[g] for g in RULE_LABELS] for r in records], bool)
    pred = np.stack([np.asarray(cols[f"p_{g}"]) > 0.5 for g in RULE_LABELS], -1)
    pool = train_records or records
    vectors, counts = np.unique(np.array([[r.gates[g] for g in RULE_LABELS] for r in pool], bool), axis=0,
                                return_counts=True)
    majority = vectors[np.argmax(counts)]
    return {"perfect_match": 100.0 * float(np.mean((pred == truth).all(-1))),
            "majority_perfect_match": 100.0 * float(np.mean((truth == majority).all(-1))),
            "majority_gates": dict(zip(RULE_LABELS, majority.astype(int).tolist())),
            "rule_accuracy": {g: 100.0 * float(np.mean(pred[:, i] == truth[:, i])) for i, g in enumerate(RULE_LABELS)}}


def evaluation_settings(model: Path, root: Path, describe: bool | None) -> tuple[int, bool, np.ndarray]:
    """(BEV image side in pixels, describe, rule-check thresholds [7]) to judge the set ``root`` with the judge
    ``model``: the set's image size (meta.json) and thresholds, ``--describe``, each checked against the judge's
    record of its training (``policy.trained_settings``: an error naming both when they differ), which supplies
    what is not given."""
    from jaxdrive.judge.policy import trained_settings

    size, thresholds = dataset_image_size(root), dataset_thresholds(root)
    return trained_settings(model, image_size=size, describe=describe, thresholds=thresholds,
                            given={"image_size": f"--data {root} (meta.json image_size {size})",
                                   "describe": "--describe", "thresholds": f"--data {root} (meta.json thresholds)"})


OUTPUTS = ("dqc.parquet", "tps.parquet", "gates.json")  # what a run writes in --out (tps, gates: when it can)
PARTIAL = "partial"  # the judged batches of a run in progress, in --out (removed when its outputs are written)


def _write_parquet(table, path: Path) -> None:
    import pyarrow.parquet as pq

    with atomic.replacing(path) as tmp:
        pq.write_table(table, tmp)


def _digest(value) -> str:
    """SHA-256 of ``value``'s canonical JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _stats(folder: Path, names) -> dict:
    """{name: [size in bytes, modification time in ns]} of files in ``folder``."""
    return {n: [st.st_size, st.st_mtime_ns] for n in names for st in [(folder / n).stat()]}


def run_identity(args, root: Path, records, size: int, describe: bool, thresholds: np.ndarray) -> dict:
    """What a run's judged batches depend on, which ``--resume`` compares with the interrupted run's: the model
    directory's files (names, sizes, modification times: the weights, config and ``jaxdrive_judge.json``), the data
    directory and split, the records judged in order (id, scene, proposal, label: what ``--limit`` selects, so a
    limit selecting the same records is the same run) and their scene files (sizes, times), the BEV image side,
    ``describe``, the thresholds and ``--batch-size`` (batch i is part i)."""
    model = Path(args.model)
    return {"model": _digest(_stats(model, sorted(p.name for p in model.iterdir() if p.is_file()))),
            "data": str(root.resolve()), "split": args.split,
            "records": _digest([[r.id, r.scene, r.proposal, r.label] for r in records]),
            "scenes": _digest(_stats(root, sorted({r.scene for r in records}))),
            "image_size": int(size), "describe": bool(describe), "thresholds": np.asarray(thresholds).tolist(),
            "batch_size": args.batch_size}


def _committed_batches(out: Path, identity: dict, resume: bool):
    """The ``RunDir`` ``out/partial`` the run commits its judged batches to: with ``resume``, an interrupted run's
    there, kept when its identity is this one's (else a ValueError naming what differs); without, emptied first."""
    from jaxdrive.scoring.outputs import MANIFEST, RunDir, RunDirError

    path = out / PARTIAL
    if (path / MANIFEST).is_file() and not resume:
        print(f"judge run: removing the judged batches of an earlier run in {path} (--resume continues it)",
              file=sys.stderr)
        shutil.rmtree(path)
    elif resume and not (path / MANIFEST).is_file():
        print(f"--resume: {out} holds no interrupted run; judging every record", file=sys.stderr)
    try:
        parts = RunDir(path, identity, resume=resume)
    except RunDirError as e:
        raise UserInputError(str(e)) from None
    parts.say_scored_again()
    return parts


def run(args) -> int:
    import pyarrow as pa

    from jaxdrive.cli import EXIT_INTERRUPTED
    from jaxdrive.judge.policy import DriveJudge

    root = Path(args.data)
    if args.batch_size < 1:
        raise UserInputError(f"--batch-size: expected >= 1, got {args.batch_size}")
    if args.limit < 0:
        raise UserInputError(f"--limit: expected >= 0 (0 = every record), got {args.limit}")
    if not (root / "records.jsonl").is_file():
        raise UserInputError(f"--data {root}: no records.jsonl")
    if not (Path(args.model) / "config.json").is_file():
        raise UserInputError(f"--model {args.model}: not a pretrained model directory (no config.json)")
    out = output_dir("--out", Path(args.out or root / "judge"))
    if args.report:
        output_file("--report", Path(args.report))
    records = read_records(root, args.split)
    if args.limit:
        records = records[:args.limit]
    if not records:
        raise UserInputError(f"--split {args.split}: no records in {root}")
    scenes = read_scenes(root, records)
    all_pairs = read_pairs(root, args.split)
    check_pair_records(root, all_pairs, read_records(root))
    size, describe, thresholds = evaluation_settings(args.model, root, args.describe)
    parts = _committed_batches(out, run_identity(args, root, records, size, describe, thresholds), args.resume)
    try:
        judge = DriveJudge.from_pretrained(args.model, bev=BevConfig(size=size), describe=describe,
                                           batch_size=args.batch_size, pad=pad_spec(32), thresholds=thresholds)
        for name in OUTPUTS:  # an earlier run's, which this one may not rewrite (no pairs, no gates, interrupted)
            for path in (out / name, *metric_files(out / name)):  # and `jaxdrive eval`'s metrics of it
                path.unlink(missing_ok=True)
        if args.report:  # likewise an earlier run's report, which a failed run would leave to be read as its own
            Path(args.report).unlink(missing_ok=True)
        cols = judge_records(judge, scenes, records, args.batch_size, not args.no_progress, parts)
    except BaseException as e:
        kept = sum(v["rows"] for v in parts.completed.values())
        parts.discard_if_unused()
        interrupted = isinstance(e, KeyboardInterrupt)
        if interrupted or kept:  # a crash too: what it judged is kept
            print(f"\n{'interrupted' if interrupted else 'failed'}: {kept} of {len(records)} records judged are kept "
                  f"in {out}; continue with the same arguments plus --resume", file=sys.stderr)
        if not interrupted:
            raise
        return EXIT_INTERRUPTED
    _write_parquet(pa.table(cols), out / "dqc.parquet")
    written = [out / "dqc.parquet"]
    by_id = dict(zip(cols["id"], cols["score"]))
    pairs = [p for p in all_pairs if p.a_record in by_id and p.b_record in by_id]
    if pairs:
        _write_parquet(pa.table({"id": [p.id for p in pairs], "score_a": [by_id[p.a_record] for p in pairs],
                                 "score_b": [by_id[p.b_record] for p in pairs],
                                 "preferred": [p.preferred for p in pairs]}), out / "tps.parquet")
        written.append(out / "tps.parquet")
    if all(r.gates for r in records):
        stats = gate_match(records, cols, read_records(root, "train"))
        atomic.write_text(out / "gates.json", json.dumps(stats, indent=2) + "\n")
        print(f"gate perfect match {stats['perfect_match']:.2f}% (majority baseline {stats['majority_perfect_match']:.2f}%)")
        written.append(out / "gates.json")
    if args.report:
        from jaxdrive.judge.report import write_report

        written.append(write_report(args.report, root, records, cols))
    shutil.rmtree(out / PARTIAL)
    for w in written:
        print(w)
    return 0


def add_run(jsub) -> None:
    p = jsub.add_parser("run", help="judge a dataset's records with a DriveJudge model; write prediction parquets "
                        "for 'jaxdrive eval dqc|tps' and optionally an HTML report")
    p.add_argument("--model", type=Path, required=True, help="pretrained judge directory (e.g. an SFT export_dir)")
    p.add_argument("--data", type=Path, required=True, help="dataset directory (records.jsonl)")
    p.add_argument("--split", default="test", choices=["train", "test"], help="which split's records")
    p.add_argument("--out", type=Path, help="output directory (default: DATA/judge)")
    p.add_argument("--report", type=Path, help="also write a self-contained HTML report here")
    p.add_argument("--describe", action="store_true", default=None,
                   help="add the text scene description (ablation); default: as the judge was trained "
                        "(its jaxdrive_judge.json), else without")
    p.add_argument("--batch-size", type=int, default=8, help="records judged per model call")
    p.add_argument("--limit", type=int, default=0, help="judge only the first N records (0 = all)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run into --out: judge only the "
                   "records whose batches it did not commit (the same arguments, else refused)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
