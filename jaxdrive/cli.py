"""jaxdrive: rule-grounded scoring of driving trajectories (EPDMS kernels in JAX) and post-training of driving VLMs.

Exit status: 0 success; 1 failure during the run (a bug or an environment problem: the traceback and a request to
report it); 2 bad usage or input (jaxdrive's own input checks, one line);
3 finished, but some scenes could not be read (score: named in OUT/errors.jsonl) or none was scored; 130 interrupted
(Ctrl-C; a scoring run continues with --resume --out OUT).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from jaxdrive import interrupts, xla_cache
from jaxdrive.errors import UserInputError

EXIT_OK = 0
EXIT_FAILURE = 1  # an error during the run (a traceback is printed: it is a bug or an environment problem)
EXIT_USAGE = 2
EXIT_PARTIAL = 3  # the run finished, but some scenes could not be read (named in errors.jsonl), or none was scored
EXIT_INTERRUPTED = 130
REPORT_BUG = ("unexpected error: this is a bug in jaxdrive (or a problem of its environment), not a mistake in your "
              "input; please report it to the jaxdrive maintainers with the command line and the traceback above")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" only where the help text does not mention a default already and X is a value (not
    None, False or an empty string)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default == "" or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _add_score(sub) -> None:
    p = sub.add_parser("score", help="score trajectories with the EPDMS rule kernels (default: built-in synthetic scenes)")
    src = p.add_argument_group("inputs")
    src.add_argument("--scenes", type=Path,
                     help="directory of epdms-scene/1 JSON files, searched recursively (default: synthetic scenes)")
    src.add_argument("--count", type=int, help="number of synthetic scenes (default 1024)")
    src.add_argument("--seed", type=int, help="seed of the synthetic scenes (default 0)")
    src.add_argument("--num-proposals", type=int, help="proposals per synthetic scene (default 16)")
    src.add_argument("--proposals", type=Path, help="with --scenes: .npz of one [K, 41, 11] state array per scene id "
                     "(global frame), scored in row order instead of the files' proposals (no previous plans: EC is "
                     "NaN and EPDMS its /14 form)")
    src.add_argument("--predictions", action="append", metavar="[NAME=]FILE",
                     help="with --scenes (converted metric caches): .npz or .parquet of token -> (8, 3) agent poses "
                     "at 2 Hz (optional previous-frame poses; several named agents: parquet column agent, npz keys "
                     "AGENT/TOKEN); repeatable; NAVSIM's official per-token evaluation, its CSV and summary table")
    src.add_argument("--allow-offset-start", action="store_true",
                     help="score proposals whose first state is not the ego's current state (beyond 50 m or "
                          "pi/2 rad; refused by default), with a note on stderr naming each such scene")
    p.add_argument("--out", type=Path, help="output directory (default: runs/score-<time>)")
    p.add_argument("--resume", action="store_true", help="continue the run recorded in --out (needs --out)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="scenes per batch, sharded over the devices (CPU: 16 keeps reading or generating beside "
                        "the scoring; from a scene store at K = 16, 64 scored ~1.9x faster after compile on 2 cores; "
                        "accelerators: raise it)")
    p.add_argument("--shard-size", type=int, default=256,
                   help="scenes per parquet shard (unit of resume); with --ep-mode batch a batch never spans two "
                        "shards, so the shard size also changes which scenes share a normaliser")
    p.add_argument("--ep-mode", default="scene", choices=["scene", "batch", "reference"],
                   help="EP normaliser: max over the scene's proposals (NAVSIM), over the batch, or a fixed reference")
    p.add_argument("--reference-progress", type=Path, help="JSON {scene_id: metres} for --ep-mode reference")
    p.add_argument("--gates", type=Path, help="JSON list of 9 booleans (nc,dac,ddc,tlc,ep,ttc,lk,hc,ec) for every "
                   "scene, or {scene_id: 9 booleans} per scene, or {scene_id: [[9 booleans] per proposal]} (one row per "
                   "proposal, checked before the run where the scene's count is known without reading it); "
                   "or judge:MODEL_DIR[,describe][,size=N]: per-proposal gates decided by a DriveJudge model "
                   "(BEV images of N pixels, the side it was trained on; default 64); all on if omitted")
    p.add_argument("--human-filter", action="store_true",
                   help="NAVSIM's human penalty filter (scenes with a logged human future)")
    p.add_argument("--simulate", action="store_true",
                   help="run NAVSIM's LQR tracker + bicycle model on each proposal before scoring")
    p.add_argument("--workers", type=_workers, default="auto",
                   help="processes that read / generate and pad scenes (1: one reader thread beside the device); "
                        "auto: one per core (at most 4) for runs of 512 scenes or more read from JSON files or "
                        "generated, else 1. From JSON files 2 reader processes are ~1.7x faster than 1 on a 2-core "
                        "machine")
    p.add_argument("--devices", type=int, help="number of local devices for the data mesh axis (all if omitted)")
    p.add_argument("--cpu-devices", type=int,
                   help="split the host CPU into N JAX devices (sets XLA_FLAGS=--xla_force_host_platform_device_count=N "
                        "before JAX starts), e.g. --cpu-devices 8 --devices 8 to try data sharding on a laptop")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_score)


def _workers(text: str) -> int | str:
    """``--workers``: "auto" or a whole number (checked by ``ScoreOptions.validate``)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of processes or 'auto', got {text!r}") from None


def _load_json(path: Path, what: str):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:  # a ValueError, not a JSONDecodeError: it was a traceback
        raise UserInputError(f"{what} {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except (OSError, json.JSONDecodeError) as e:
        raise UserInputError(f"{what} {path}: cannot read JSON ({e})") from None


def _run_score(args) -> int:
    if args.predictions:
        from jaxdrive import distributed
        from jaxdrive.scoring.predictions import run_predictions

        distributed.require_single_process("jaxdrive score --predictions")
        return run_predictions(args)
    from jaxdrive.scoring.outputs import SHARD_GLOB, RunDirError
    from jaxdrive.scoring.runner import ScoreOptions, auto_workers, score_source
    from jaxdrive.data.store import is_store
    from jaxdrive.scoring.sources import SceneDirSource, SceneStoreSource, SyntheticSource
    from jaxdrive.scoring.summary import plot_summary, summary_table, whole_run_stats

    if args.resume and not args.out:
        raise UserInputError("--resume: name the run to continue with --out DIR")
    synthetic_defaults(args, {"--count": 1024, "--seed": 0, "--num-proposals": 16})
    if args.proposals and not args.scenes:
        raise UserInputError("--proposals: needs --scenes DIR (the scenes the arrays belong to)")
    if args.proposals and is_store(args.scenes):
        raise UserInputError(f"--proposals: pairs arrays with a folder of scene JSON files; {args.scenes} is a scene "
                         f"store (score its scenes' own proposals with --scenes alone)")
    if args.proposals:
        from jaxdrive.scoring.proposal_files import SceneDirProposalSource

        source = SceneDirProposalSource(args.scenes, args.proposals, allow_offset_start=args.allow_offset_start)
    elif args.scenes and is_store(args.scenes):
        source = SceneStoreSource(args.scenes)
    else:
        source = (SceneDirSource(args.scenes, allow_offset_start=args.allow_offset_start) if args.scenes
                  else SyntheticSource(args.count, args.seed, args.num_proposals))
    if isinstance(source, SceneDirSource) and source.skipped:
        print(f"--scenes {args.scenes}: skipped {len(source.skipped)} .json file(s) that are not scene files "
              f"(e.g. {source.skipped[0]})", file=sys.stderr)
    gates = _load_json(args.gates, "--gates") if args.gates and not str(args.gates).startswith("judge:") else None
    options = ScoreOptions(batch_size=args.batch_size, shard_size=args.shard_size, ep_mode=args.ep_mode,
                           simulate=args.simulate, num_devices=args.devices, gates=gates,
                           workers=1 if args.workers == "auto" else args.workers,
                           human_filter=args.human_filter,
                           reference_progress=_load_json(args.reference_progress, "--reference-progress")
                           if args.reference_progress else None)
    if not args.scenes:
        from jaxdrive.data.synthetic import pad_spec

        options.pad = pad_spec(args.num_proposals)
    elif isinstance(source, SceneStoreSource):
        options.pad = source.pad_spec()  # every scene fits: one compile
        note = None if args.simulate else source.refresh_note(options.pad)
        if note:
            print(f"--scenes {args.scenes}: {note}", file=sys.stderr)
    if args.workers == "auto":
        options.workers = auto_workers(source, options.pad)
    out = args.out or Path("runs") / time.strftime("score-%Y%m%d-%H%M%S")
    if args.resume and not any((Path(out) / name).exists() for name in ("manifest.json", "progress")) \
            and not any(Path(out).glob(SHARD_GLOB)):  # else refused (RunDir): shards of no recorded run
        print(f"--resume: {out} holds no run yet (a new directory?); starting the run there", file=sys.stderr)
    if args.gates and str(args.gates).startswith("judge:"):  # per-proposal gates from a DriveJudge model
        from jaxdrive.judge.score_gates import gates_from_judge

        options.gates = gates_from_judge(str(args.gates), source, out, pad=options.pad, progress=not args.no_progress)
    try:
        live = score_source(source, out, options, resume=args.resume, progress=not args.no_progress)
    except RunDirError as e:
        raise UserInputError(str(e)) from None
    except KeyboardInterrupt:
        print(f"\ninterrupted: completed shards are kept in {out}; continue with the same arguments plus "
              f"--resume --out {out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    from jaxdrive import distributed

    if not distributed.is_main():  # process 0 reports the whole run
        return EXIT_OK
    stats = whole_run_stats(out, live)
    for e in stats.errors:
        named = e["error"] if e["name"] in e["error"] else f"{e['name']}: {e['error']}"
        print(f"not scored: {named}", file=sys.stderr)
    _note_unused_entries(out, {f"--proposals {args.proposals}": source.proposals if args.proposals else None,
                               f"--gates {args.gates}": options.gates if isinstance(options.gates, dict) else None,
                               f"--reference-progress {args.reference_progress}": options.reference_progress})
    if stats.proposals == 0:
        print(f"no scenes scored: none of the {len(source)} inputs could be read (see {out}/errors.jsonl)",
              file=sys.stderr)
        return EXIT_PARTIAL
    print(summary_table(stats, distributed.process_count()))
    png = plot_summary(stats, Path(out) / "summary.png")
    print(f"results: {out}/part-*.parquet   plot: {png}")
    return EXIT_PARTIAL if stats.errors else EXIT_OK


def synthetic_defaults(args, defaults: dict[str, int]) -> None:
    """Fills the synthetic scenes' flags (``defaults``: flag -> its value when not given, e.g. ``{"--count": 1024}``);
    with ``--scenes`` any of them given is a usage error (it would be ignored: the scenes come from the files)."""
    attr = {flag: flag.lstrip("-").replace("-", "_") for flag in defaults}
    given = [flag for flag in defaults if getattr(args, attr[flag]) is not None]
    if args.scenes and given:
        raise UserInputError(f"{', '.join(given)}: only for the built-in synthetic scenes; --scenes {args.scenes} "
                         f"scores the files' scenes")
    for flag, value in defaults.items():
        if getattr(args, attr[flag]) is None:
            setattr(args, attr[flag], value)


def _note_unused_entries(out: Path, tables: dict[str, dict | None]) -> None:
    """Says on stderr which per-scene input tables (flag -> {scene id: ...}) hold scene ids that the run did not score
    (a mistyped id, or a file meant for other scenes): they are not an error, but not silently dropped either."""
    from jaxdrive.scoring.outputs import run_scene_ids

    tables = {flag: table for flag, table in tables.items() if table}
    scored = run_scene_ids(out) if tables else set()
    for flag, table in tables.items():
        unused = sorted(set(table) - scored)
        if unused:
            print(f"{flag}: {len(unused)} of its {len(table)} scene ids name no scene scored by this run, e.g. "
                  f"{unused[:3]}", file=sys.stderr)


def _add_scenes(sub) -> None:
    p = sub.add_parser("scenes", help="generate or preview scenes")
    ssub = p.add_subparsers(dest="scenes_cmd", required=True)
    g = ssub.add_parser("generate", help="write synthetic scenes as epdms-scene/1 JSON files", formatter_class=_Help)
    g.add_argument("--count", type=int, default=10, metavar="N", help="number of synthetic scenes")
    g.add_argument("--seed", type=int, default=0, help="scene i is generated from seed + i (the scenes of "
                   "`jaxdrive score --seed`)")
    g.add_argument("--num-proposals", "--proposals", dest="proposals", metavar="K", type=int, default=16,
                   help="proposals per scene (as `jaxdrive score --num-proposals`)")
    g.add_argument("--out", type=Path, required=True, help="directory of the JSON files (created), or of the store")
    g.add_argument("--store", action="store_true", help="write one binary scene store (jaxdrive.data.store) to --out")
    g.set_defaults(func=_run_generate)
    from jaxdrive.data.store import add_convert_parser, add_refresh_parser

    add_convert_parser(ssub)
    add_refresh_parser(ssub)
    from jaxdrive.viz import preview_parser

    v = preview_parser(ssub.add_parser("preview", help="write a bird's-eye-view PNG of a scene and its proposals; "
                                       "--color-by nc|dac|...|epdms colours by scores from the kernels"))
    v.set_defaults(func=_run_preview)
    from jaxdrive.data.navsim_cache import add_from_navsim_parser

    add_from_navsim_parser(ssub)
    from jaxdrive.planners.cli import add_pdm_closed_parser

    add_pdm_closed_parser(ssub)


def _run_generate(args) -> int:
    from jaxdrive.data.scene_json import write_scene
    from jaxdrive.data.synthetic import iter_scenes
    from jaxdrive.output_paths import output_dir

    if args.count < 1:
        raise UserInputError(f"--count: expected a positive number of scenes, got {args.count}")
    if args.proposals < 1:
        raise UserInputError(f"--num-proposals: expected a positive number of proposals per scene, got {args.proposals}")
    if args.seed < 0:
        raise UserInputError(f"--seed: expected a non-negative integer, got {args.seed}")
    output_dir("--out", args.out)
    if args.store:
        from jaxdrive.data.store import write_store

        write_store(iter_scenes(args.count, args.seed, args.proposals), args.out)
        print(f"wrote {args.count} scenes to the store {args.out}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for s in iter_scenes(args.count, args.seed, args.proposals):
        write_scene(s, args.out / f"{s.id}.json")
    print(f"wrote {args.count} scenes to {args.out}")
    return 0


def _run_preview(args) -> int:
    from jaxdrive.viz import preview_main

    return preview_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxdrive", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_score(sub)
    _add_scenes(sub)
    from jaxdrive.vocab.cli import add_vocab_parser

    add_vocab_parser(sub)
    from jaxdrive.train_cli import add_train_subcommands

    add_train_subcommands(sub)
    from jaxdrive.agent.memory_cli import add_memory_subcommands
    from jaxdrive.agent.agent_cli import add_agent_subcommands
    from jaxdrive.eval.cli import add_eval_subcommands
    from jaxdrive.judge.cli import add_judge_subcommands

    add_memory_subcommands(sub)
    add_agent_subcommands(sub)
    add_eval_subcommands(sub)  # dqc | tps | planning | vqa
    add_judge_subcommands(sub)
    from jaxdrive.datasets.cli import add_data_subcommands

    add_data_subcommands(sub)  # data build
    _show_defaults(parser)
    return parser


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every subcommand's --help states its options' defaults (``_Help``), wherever it is defined."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.formatter_class = _Help
                _show_defaults(child)


def _force_cpu_devices(n: int | None) -> None:
    """``--cpu-devices N``: must run before JAX initialises its backends."""
    if n is None:
        return
    if n < 1:
        raise UserInputError(f"--cpu-devices: expected a positive number of devices, got {n}")
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    os.environ["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={n}"])


MULTI_PROCESS_COMMANDS = ("score", "train")  # sharded across the processes of a launched job; the rest run as one


def _command_words(args) -> list[str]:
    """The command and its subcommand (e.g. ["judge", "run"]) as parsed."""
    sub = [getattr(args, d) for d in ("scenes_cmd", "vocab_cmd", "job", "memory_command", "agent_command", "eval_cmd",
                                      "judge_cmd", "data_command") if getattr(args, d, None)]
    return [args.command, *sub[:1]]


def main(argv: list[str] | None = None) -> int:
    """Runs the command of ``argv`` (default: the command line) and returns its exit status. Run as the ``jaxdrive``
    program (no ``argv``), an interrupt always reaches the command and ends the process at once
    (``jaxdrive.interrupts``)."""
    if argv is None:
        interrupts.deliver_swallowed_interrupts()
    code = _main(argv)
    if argv is None and code == EXIT_INTERRUPTED:
        interrupts.exit_now(code)
    return code


def _main(argv: list[str] | None) -> int:
    if argv is None and sys.argv[1:2] in (["score"], ["vocab"]):  # the command line, not a caller's argv: glibc
        from jaxdrive.malloc_tunables import reexec_with_malloc_tunables  # malloc set so that XLA:CPU reuses buffers

        try:
            reexec_with_malloc_tunables()
        except UserInputError as e:
            print(f"jaxdrive {sys.argv[1]}: {e}", file=sys.stderr)
            return EXIT_USAGE
    from jaxdrive import distributed

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _force_cpu_devices(getattr(args, "cpu_devices", None))
        distributed.initialize_from_env()  # multi-process job from the launcher's environment; else a no-op
        if args.command not in MULTI_PROCESS_COMMANDS:
            distributed.require_single_process(" ".join(["jaxdrive", *_command_words(args)]))
        xla_cache.enable()  # per kind of host CPU (jaxdrive.xla_cache)
        code = args.func(args)
        distributed.mark_finished(code in (EXIT_OK, EXIT_PARTIAL), code)
        return code
    except UserInputError as e:  # jaxdrive's own input checks: the user's mistake, one line
        print(f"jaxdrive {args.command}: {e}", file=sys.stderr)
        distributed.mark_finished(False, EXIT_USAGE)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\njaxdrive {args.command}: interrupted", file=sys.stderr)
        distributed.mark_finished(False, EXIT_INTERRUPTED, interrupted=True)
        return EXIT_INTERRUPTED
    except Exception:  # anything else (a ValueError of numpy's or JAX's included) is a bug, not bad usage
        traceback.print_exc()
        print(f"jaxdrive {args.command}: {REPORT_BUG}", file=sys.stderr)
        distributed.mark_finished(False, EXIT_FAILURE)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
