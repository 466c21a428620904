"""``jaxdrive vocab``: score scenes against a trajectory vocabulary; ``jaxdrive vocab build``: a demo vocabulary."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from jaxdrive.errors import UserInputError


def add_vocab_parser(sub) -> None:
    p = sub.add_parser("vocab", help="score every scene against a (K, 40, 3) trajectory vocabulary (GTRS / Hydra-MDP "
                       "targets); `vocab build` makes a demo vocabulary")
    p.add_argument("--vocabulary", type=Path, help=".npy of shape (K, 40, 3): x, y [m], heading [rad] at 0.1..4.0 s, "
                   "ego rear-axle frame (checked: no step over 100 m/s, |heading| <= 2π)")
    p.add_argument("--scenes", type=Path, help="directory of epdms-scene/1 files (e.g. from `scenes from-navsim`); "
                   "default: synthetic scenes (--count, --seed; needs --reference pdm-closed or first-proposal)")
    p.add_argument("--count", type=int, help="number of synthetic scenes (64 when not given; not with --scenes)")
    p.add_argument("--seed", type=int, help="seed of the synthetic scenes (0 when not given; not with --scenes)")
    p.add_argument("--out", type=Path, help="output directory")
    p.add_argument("--resume", action="store_true", help="continue the run recorded in --out")
    p.add_argument("--export", choices=["gtrs"], help="also write the GTRS pickle gtrs_{K}.pkl "
                   "(token -> metric -> float16 (K,))")
    p.add_argument("--ep-mode", default="gtrs", choices=["gtrs", "pairwise", "batch"],
                   help="EP: gtrs = GTRS's targets (its scorer under PROGRESS_MODE=gen_gt: masked progress over "
                        "max(its own, the reference's), so a trajectory with a zero multiplier gets EP 0); pairwise = "
                        "NAVSIM's official [reference, proposal] pairing (unmasked numerator); batch = one normaliser "
                        "over the reference and the whole vocabulary (GTRS's scorer without gen_gt)")
    p.add_argument("--no-simulate", action="store_true", help="score the poses as given (no LQR / bicycle)")
    p.add_argument("--no-human-filter", action="store_true", help="do not apply NAVSIM's human penalty filter")
    p.add_argument("--reference", default="cache", choices=["cache", "first-proposal", "pdm-closed"],
                   help="reference (proposal 0): the scene's cached PDM-Closed, or else its first proposal, or else "
                        "PDM-Closed planned in JAX (jaxdrive.planners.pdm_closed)")
    p.add_argument("--chunk", type=int, default=1024, help="proposals per scoring call (bounds memory)")
    p.add_argument("--shard-size", type=int, default=64, help="scenes per parquet shard (unit of resume)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_vocab_cli)
    vsub = p.add_subparsers(dest="vocab_cmd")
    b = vsub.add_parser("build", help="k-means vocabulary over synthetic human trajectories")
    b.add_argument("--size", type=int, default=256, help="K, the number of trajectories")
    b.add_argument("--from-scenes", type=int, default=1024, help="synthetic scenes whose human trajectories are clustered")
    b.add_argument("--seed", type=int, default=0, help="seed of the synthetic scenes and of k-means' start")
    b.add_argument("--out", type=Path, required=True, help="output .npy")
    b.set_defaults(func=run_build_cli)


def run_build_cli(args) -> int:
    from jaxdrive import atomic
    from jaxdrive.output_paths import output_file
    from jaxdrive.vocab.build import build_vocabulary

    output_file("--out", args.out, make_parents=True)  # before the clustering
    if args.from_scenes < 1:
        raise UserInputError(f"--from-scenes: expected a positive number of scenes, got {args.from_scenes}")
    vocab = build_vocabulary(args.size, args.from_scenes, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(args.out) as tmp, open(tmp, "wb") as f:  # at --out itself (np.save(path) adds ".npy")
        np.save(f, vocab)
    print(f"wrote {args.out}: vocabulary {vocab.shape} from {args.from_scenes} synthetic human trajectories")
    return 0


def run_vocab_cli(args) -> int:
    from jaxdrive import distributed
    from jaxdrive.cli import synthetic_defaults
    from jaxdrive.scoring.outputs import RunDirError
    from jaxdrive.scoring.sources import SyntheticSource
    from jaxdrive.vocab.core import check_vocabulary
    from jaxdrive.vocab.job import SceneFileSource, VocabOptions, run_vocab

    distributed.require_single_process("jaxdrive vocab")
    synthetic_defaults(args, {"--count": 64, "--seed": 0})
    if args.vocabulary is None or args.out is None:
        raise UserInputError("--vocabulary and --out are required (or use `jaxdrive vocab build`)")
    try:
        vocab = np.load(args.vocabulary, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:  # EOFError: an empty file
        raise UserInputError(f"--vocabulary {args.vocabulary}: cannot read a .npy array ({e or 'empty file'})") from None
    if isinstance(vocab, np.lib.npyio.NpzFile):
        names = ", ".join(vocab.files)
        vocab.close()
        raise UserInputError(f"--vocabulary {args.vocabulary}: a .npz archive ({names}); pass one (K, 40, 3) array as .npy")
    vocab = check_vocabulary(vocab)
    source = SceneFileSource(args.scenes) if args.scenes else SyntheticSource(args.count, args.seed, 1)
    options = VocabOptions(ep_mode=args.ep_mode, simulate=not args.no_simulate, human_filter=not args.no_human_filter,
                           chunk=args.chunk, shard_size=args.shard_size, reference=args.reference, export=args.export)
    try:
        stats = run_vocab(source, vocab, args.out, options, resume=args.resume, progress=not args.no_progress)
    except RunDirError as e:
        print(f"jaxdrive vocab: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        from jaxdrive.cli import EXIT_INTERRUPTED

        print(f"\ninterrupted: completed shards are kept in {args.out}; continue with the same arguments plus "
              f"--resume --out {args.out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"scored {stats.scenes} scenes x {vocab.shape[0]} trajectories = {stats.rows:,} rows in {stats.seconds:.1f} s "
          f"({stats.skipped_shards} shards resumed, {len(stats.errors)} scenes skipped) -> {args.out}")
    for e in stats.errors:
        print(f"skipped {e['name']}: {e['error']}", file=sys.stderr)
    return 3 if stats.errors else 0
