"""``jaxdrive judge <command>``: DriveJudge datasets, baselines and judging.

    jaxdrive judge data --out DIR [--train N --test M --seed S]   synthetic labelled set (records, pairs, BEV images)
    jaxdrive judge baselines --data DIR [--split test]            EPDMS / oracle / ADE / FDE prediction files
    jaxdrive judge run --model M --data DIR [--report out.html]    a DriveJudge model over the records and pairs

Add a command by writing ``add_<name>(jsub)`` and listing it in ``JUDGE_COMMANDS``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from jaxdrive.errors import UserInputError
from jaxdrive.judge.bev import IMAGE_SIZE
from jaxdrive.judge.run import add_run
from jaxdrive.output_paths import output_dir


def _positive(name: str, value: int) -> None:
    if value < 0:
        raise UserInputError(f"{name}: expected >= 0, got {value}")


MAX_IMAGE_SIZE = 4096  # BEV pixels per side (--image-size 100000 was killed for memory, 30 GB per image)


def run_labelled_data(args) -> int:
    from jaxdrive.judge.labelled import build_labelled_dataset

    if args.labels is None:
        raise UserInputError("--scenes needs --labels LABELS.jsonl (one {scene_id, proposal, label} per line)")
    given = [f for f, v in (("--train", args.train), ("--test", args.test), ("--per-scene", args.per_scene)) if v is not None]
    if given:
        raise UserInputError(f"{', '.join(given)}: options of the synthetic set; with --scenes the split is --test-scenes")
    if args.test_scenes < 0 or args.pairs_per_scene < 0 or args.batch_size < 1 or args.seed < 0:
        raise UserInputError(f"--test-scenes, --pairs-per-scene, --seed >= 0 and --batch-size >= 1 expected, got "
                         f"{args.test_scenes}, {args.pairs_per_scene}, {args.seed}, {args.batch_size}")
    if not 8 <= args.image_size <= MAX_IMAGE_SIZE:
        raise UserInputError(f"--image-size: expected 8..{MAX_IMAGE_SIZE}, got {args.image_size}")
    output_dir("--out", args.out)
    meta = build_labelled_dataset(args.out, args.scenes, args.labels, test_scenes=args.test_scenes, seed=args.seed,
                                  image_size=args.image_size, pairs_per_scene=args.pairs_per_scene,
                                  batch_size=args.batch_size, progress=not args.no_progress)
    print(json.dumps({k: meta[k] for k in ("scenes", "records", "challenging", "reasonable_fraction", "pairs",
                                           "thresholds")}))
    print(f"Eq. 13 thresholds fitted on the training split: DQC accuracy {100 * meta['threshold_fit']['accuracy']:.2f}% "
          f"(appendix B.1's: {100 * meta['threshold_fit']['default_accuracy']:.2f}%)")
    print(f"wrote {args.out}/records.jsonl, pairs.jsonl, scenes/, images/, meta.json")
    return 0


def run_data(args) -> int:
    from jaxdrive.judge.synthetic import build_dataset, check_seeds, holds_set

    if args.scenes is not None or args.labels is not None:
        if args.scenes is None:
            raise UserInputError("--labels needs --scenes DIR (the labelled scene files)")
        return run_labelled_data(args)
    args.train = 200 if args.train is None else args.train
    args.test = 60 if args.test is None else args.test
    args.per_scene = 4 if args.per_scene is None else args.per_scene
    _positive("--train", args.train)
    _positive("--test", args.test)
    check_seeds(args.seed, args.train)  # before the folders are made
    if args.per_scene < 1 or not 8 <= args.image_size <= MAX_IMAGE_SIZE:
        raise UserInputError(f"--per-scene >= 1 and --image-size in 8..{MAX_IMAGE_SIZE} expected, got {args.per_scene}, "
                         f"{args.image_size}")
    if args.batch_size < 1:
        raise UserInputError(f"--batch-size: expected >= 1, got {args.batch_size}")
    output_dir("--out", args.out)
    if holds_set(args.out):
        print(f"judge data: replacing the set in {args.out} (its scenes, images and the predictions in baselines/ "
              "and judge/)", file=sys.stderr)
    meta = build_dataset(args.out, args.train, args.test, seed=args.seed, per_scene=args.per_scene,
                         image_size=args.image_size, batch_size=args.batch_size, progress=not args.no_progress)
    print(json.dumps({k: meta[k] for k in ("records", "reasonable_fraction", "pairs")}))
    print(f"wrote {args.out}/records.jsonl, pairs.jsonl, scenes/, images/")
    return 0


def run_baselines(args) -> int:
    from jaxdrive.judge.baselines import write_baselines
    from jaxdrive.judge.dataset import read_pairs, read_records

    if not (Path(args.data) / "records.jsonl").is_file():
        raise UserInputError(f"--data {args.data}: no records.jsonl (make one with 'jaxdrive judge data --out DIR')")
    if not read_records(args.data, args.split) and not read_pairs(args.data, args.split):
        raise UserInputError(f"--split {args.split}: no records or pairs in {args.data}")
    if args.direct_model and not (Path(args.direct_model) / "config.json").is_file():
        raise UserInputError(f"--direct-model {args.direct_model}: not a pretrained model directory (no config.json)")
    if args.out:
        output_dir("--out", args.out)
    for path in write_baselines(args.data, args.split, args.out, direct_model=args.direct_model,
                                describe=args.describe):
        print(path)
    return 0


def add_data(jsub) -> None:
    p = jsub.add_parser("data", help="write a labelled DriveJudge set: from your labelled scenes (--scenes, --labels; "
                        "split by scene) or the synthetic set (planted context rules)")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--scenes", type=Path, help="folder of labelled epdms-scene/1 files (with --labels)")
    p.add_argument("--labels", type=Path, help="JSON lines {scene_id, proposal, label 0|1[, challenging]} (with "
                   "--scenes)")
    p.add_argument("--test-scenes", type=int, default=64, help="with --scenes: scenes held out as the test split")
    p.add_argument("--pairs-per-scene", type=int, default=4, help="with --scenes: TPS pairs per scene (at most)")
    p.add_argument("--train", type=int, help="synthetic set: training scenes (default 200)")
    p.add_argument("--test", type=int, help="synthetic set: held-out test scenes (default 60)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split (--scenes) or of the generated scenes")
    p.add_argument("--per-scene", type=int, help="synthetic set: labelled trajectories per scene (default 4)")
    p.add_argument("--image-size", type=int, default=IMAGE_SIZE, help="BEV image side (pixels)")
    p.add_argument("--batch-size", type=int, default=8, help="scenes scored and rendered per batch")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_data)


def add_baselines(jsub) -> None:
    p = jsub.add_parser("baselines", help="write EPDMS / oracle-gate (DQC, TPS) and ADE / FDE (TPS) prediction "
                        "parquets for 'jaxdrive eval dqc|tps'")
    p.add_argument("--data", type=Path, required=True, help="dataset directory (records.jsonl, pairs.jsonl)")
    p.add_argument("--split", default="test", choices=["train", "test"], help="which split's records")
    p.add_argument("--out", type=Path, help="output directory (default: DATA/baselines)")
    p.add_argument("--direct-model", type=Path, help="also the VLM direct-score baseline of this pretrained directory "
                   "(e.g. trained with configs/judge_direct_sft_tiny.py)")
    p.add_argument("--describe", action="store_true", default=None,
                   help="prompt the direct-score model with the text description; default: as it was trained (its "
                        "jaxdrive_judge.json), else without")
    p.set_defaults(func=run_baselines)


JUDGE_COMMANDS = (
    add_data,
    add_baselines,
    add_run,
)


def add_judge_subcommands(sub) -> None:
    p = sub.add_parser("judge", help="DriveJudge: datasets, baselines, judging")
    jsub = p.add_subparsers(dest="judge_cmd", required=True)
    for add in JUDGE_COMMANDS:
        add(jsub)
