"""The ``jaxdrive`` command line: ``score``, ``scenes generate|preview`` and ``train sft|grpo``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from jaxdrive.eval.cli import add_eval_subcommands
from jaxdrive.judge.cli import add_judge_subcommands

EXIT_USAGE = 2
EXIT_PARTIAL = 3  # the run finished, but some scenes could not be read (named in errors.jsonl)


def _add_score(sub) -> None:
    p = sub.add_parser("score", help="score trajectories with the EPDMS rule kernels (default: built-in synthetic scenes)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    src = p.add_argument_group("inputs")
    src.add_argument("--scenes", type=Path, help="directory of epdms-scene/1 JSON files (default: synthetic scenes)")
    src.add_argument("--count", type=int, default=1024, help="number of synthetic scenes")
    src.add_argument("--seed", type=int, default=0, help="seed of the synthetic scenes")
    src.add_argument("--proposals", type=int, default=16, help="proposals per synthetic scene")
    p.add_argument("--out", type=Path, help="output directory (default: runs/score-<time>)")
    p.add_argument("--resume", action="store_true", help="continue the run recorded in --out")
    p.add_argument("--batch-size", type=int, default=16,
                   help="scenes per batch, sharded over the devices (CPU: ~16 per device is fastest; "
                        "accelerators: raise it)")
    p.add_argument("--shard-size", type=int, default=256, help="scenes per parquet shard (unit of resume)")
    p.add_argument("--ep-mode", default="scene", choices=["scene", "batch", "reference"],
                   help="EP normaliser: max over the scene's proposals (NAVSIM), over the batch, or a fixed reference")
    p.add_argument("--reference-progress", type=Path, help="JSON {scene_id: metres} for --ep-mode reference")
    p.add_argument("--gates", type=Path, help="JSON list of 9 booleans (nc,dac,ddc,tlc,ep,ttc,lk,hc,ec); default all on")
    p.add_argument("--simulate", action="store_true",
                   help="run NAVSIM's LQR tracker + bicycle model on each proposal before scoring")
    p.add_argument("--devices", type=int, help="number of local devices for the data mesh axis (default: all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_score)


def _load_json(path: Path, what: str):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} {path}: cannot read JSON ({e})") from None


def _run_score(args) -> int:
    from jaxdrive.scoring.outputs import RunDirError
    from jaxdrive.scoring.runner import ScoreOptions, score_source
    from jaxdrive.scoring.sources import SceneDirSource, SyntheticSource
    from jaxdrive.scoring.summary import plot_summary, summary_table

    source = SceneDirSource(args.scenes) if args.scenes else SyntheticSource(args.count, args.seed, args.proposals)
    gates = None
    if args.gates:
        g = _load_json(args.gates, "--gates")
        gates = np.asarray(g, dtype=bool) if isinstance(g, list) and all(isinstance(x, bool) for x in g) else np.asarray(g)
    options = ScoreOptions(batch_size=args.batch_size, shard_size=args.shard_size, ep_mode=args.ep_mode,
                           simulate=args.simulate, num_devices=args.devices, gates=gates,
                           reference_progress=_load_json(args.reference_progress, "--reference-progress")
                           if args.reference_progress else None)
    if not args.scenes:
        from jaxdrive.data.synthetic import pad_spec

        options.pad = pad_spec(args.proposals)
    out = args.out or Path("runs") / time.strftime("score-%Y%m%d-%H%M%S")
    try:
        stats = score_source(source, out, options, resume=args.resume, progress=not args.no_progress)
    except RunDirError as e:
        print(f"jaxdrive score: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(summary_table(stats))
    png = plot_summary(stats, Path(out) / "summary.png")
    print(f"results: {out}/part-*.parquet   plot: {png}")
    for e in stats.errors:
        print(f"unreadable scene {e['name']}: {e['error']}", file=sys.stderr)
    return EXIT_PARTIAL if stats.errors else 0


def _add_scenes(sub) -> None:
    p = sub.add_parser("scenes", help="generate or preview scenes")
    ssub = p.add_subparsers(dest="scenes_cmd", required=True)
    g = ssub.add_parser("generate", help="write synthetic scenes as epdms-scene/1 JSON files")
    g.add_argument("--count", type=int, default=10)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--proposals", type=int, default=16)
    g.add_argument("--out", type=Path, required=True)
    g.set_defaults(func=_run_generate)
    from jaxdrive.viz import preview_parser

    v = preview_parser(ssub.add_parser("preview", help="write a bird's-eye-view PNG of a scene and its proposals; "
                                       "--color-by nc|dac|...|epdms colours by scores from the kernels"))
    v.set_defaults(func=_run_preview)


def _run_generate(args) -> int:
    from jaxdrive.data.scene_json import write_scene
    from jaxdrive.data.synthetic import iter_scenes

    args.out.mkdir(parents=True, exist_ok=True)
    for s in iter_scenes(args.count, args.seed, args.proposals):
        write_scene(s, args.out / f"{s.id}.json")
    print(f"wrote {args.count} scenes to {args.out}")
    return 0


SCORE_FIELDS = ("nc", "dac", "ddc", "tlc", "ep", "ttc", "lk", "hc", "ec", "pdm_score", "epdms")


def _run_preview(args) -> int:
    from jaxdrive.viz import preview_main, render_scene

    if args.color_by not in SCORE_FIELDS:
        return preview_main(args)
    from jaxdrive.data.scene_json import read_scene
    from jaxdrive.data.synthetic import generate_scene
    from jaxdrive.rules.epdms import score
    from jaxdrive.scene import batch_scenes

    scene = (read_scene(args.scene) if args.scene
             else generate_scene(args.seed, num_proposals=args.num_proposals, profile=args.profile))
    sc, props, _ = batch_scenes([scene])
    values = np.asarray(getattr(score(sc, props), args.color_by))[0, : scene.num_proposals]
    out = render_scene(scene, args.out, color_by=args.color_by, values=values, title=f"{scene.id}: {args.color_by}",
                       extent=args.extent)
    print(f"wrote {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxdrive", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_score(sub)
    _add_scenes(sub)
    from jaxdrive.train_cli import add_train_subcommands

    add_train_subcommands(sub)
    add_eval_subcommands(sub)
    add_judge_subcommands(sub)
    return parser


def _enable_compilation_cache() -> None:
    """Reuse compiled XLA programs across runs (the scorer compiles in seconds; a rerun then starts at once)."""
    import os

    import jax

    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        jax.config.update("jax_compilation_cache_dir", os.path.join(os.path.expanduser("~"), ".cache", "jaxdrive", "xla"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def main(argv: list[str] | None = None) -> int:
    _enable_compilation_cache()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:
        print(f"jaxdrive {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
