"""``jaxdrive scenes add-pdm-closed SRC --out DIR``: give scenes without a cached PDM-Closed trajectory (synthetic
ones) NAVSIM's reference, computed by ``jaxdrive.planners.pdm_closed``, so ``jaxdrive vocab`` and
``jaxdrive score --predictions`` can use them.

The reference is stored like a converted metric cache's (top-level ``reference`` key): ``name`` = "pdm_closed",
``times`` and ``poses`` (the planner's 51 poses at 0.1 s over 5 s, global, as in a metric cache; NAVSIM scores the
first 41), ``states`` [41, 11] (the poses re-simulated from the ego state: NAVSIM's
row 0), ``selected_proposal`` and ``speed_limit_mps``. Scenes that already carry a reference are copied unchanged
unless ``--overwrite``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from jaxdrive.errors import UserInputError
from jaxdrive.scene import HostScene


def reference_block(result: dict, speed_limit: float | None = None) -> dict:
    """The scene's ``reference`` entry (module docstring) from a ``pdm_closed.plan`` result."""
    sel = int(result["selected_proposal"])
    return {"name": "pdm_closed", "source": "jaxdrive.planners.pdm_closed", "selected_proposal": sel,
            "speed_limit_mps": speed_limit, "times": np.round(np.arange(len(result["trajectory"])) * 0.1, 6).tolist(),
            "poses": np.round(result["trajectory"], 6).tolist(),
            "states": np.round(result["states"], 6).tolist()}


def with_pdm_closed(scenes: list[HostScene], speed_limit: float | None = None, *, overwrite: bool = False,
                    chunk: int = 8, progress: bool = False) -> list[HostScene]:
    """``scenes`` with a PDM-Closed ``reference`` added (in place) where missing (or everywhere with ``overwrite``)."""
    from jaxdrive.planners.pdm_closed import plan_batch

    todo = [s for s in scenes if overwrite or "reference" not in s.extra]
    if todo:
        for scene, result in zip(todo, plan_batch(todo, [speed_limit] * len(todo), chunk=min(chunk, len(todo)),
                                                  progress=progress)):
            scene.extra["reference"] = reference_block(result, speed_limit)
    return scenes


def add_pdm_closed_parser(scenes_sub) -> None:
    """Register ``jaxdrive scenes add-pdm-closed`` on the ``scenes`` subcommand's subparsers."""
    p = scenes_sub.add_parser("add-pdm-closed", help="add NAVSIM's PDM-Closed reference trajectory (planned in JAX) "
                              "to scenes that lack one, e.g. synthetic scenes for `jaxdrive vocab`")
    p.add_argument("scenes", type=Path, help="directory of epdms-scene/1 JSON files")
    p.add_argument("--out", type=Path, required=True, help="output directory (may equal the input: files rewritten)")
    p.add_argument("--speed-limit", type=float, default=None,
                   help="ego lane speed limit in m/s (default: unknown -> NAVSIM's 15 m/s fallback)")
    p.add_argument("--overwrite", action="store_true", help="replan scenes that already carry a reference")
    p.add_argument("--chunk", type=int, default=8, help="scenes per batched planner call")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_add_pdm_closed)


def run_add_pdm_closed(args) -> int:
    """Exit 0: all written; 2: bad arguments / no scenes; 3: some scene files unreadable (named on stderr)."""
    from jaxdrive.data.scene_json import SceneFileError, read_scene, scene_files, write_scene

    if args.speed_limit is not None and not (np.isfinite(args.speed_limit) and args.speed_limit > 0):
        raise UserInputError(f"--speed-limit: expected a positive speed in m/s, got {args.speed_limit}")
    if args.chunk < 1:
        raise UserInputError(f"--chunk: expected >= 1 scenes per call, got {args.chunk}")
    try:
        files = scene_files(args.scenes)
    except SceneFileError as e:
        raise UserInputError(f"SCENES: {e}") from None
    if not files:
        raise UserInputError(f"SCENES {args.scenes}: no *.json scene files found")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserInputError(f"--out {args.out}: cannot create the directory ({e.strerror})") from None
    failed, written = [], 0
    for start in range(0, len(files), args.chunk):  # streamed: one chunk of scenes in memory at a time
        scenes, names = [], []
        for f in files[start:start + args.chunk]:
            try:
                scenes.append(read_scene(f))
                names.append(f.relative_to(args.scenes))
            except SceneFileError as e:
                failed.append(str(e))
        with_pdm_closed(scenes, args.speed_limit, overwrite=args.overwrite, chunk=args.chunk,
                        progress=not args.no_progress)
        for scene, name in zip(scenes, names):
            (args.out / name).parent.mkdir(parents=True, exist_ok=True)
            write_scene(scene, args.out / name)
        written += len(scenes)
    for msg in failed:
        print(f"jaxdrive scenes add-pdm-closed: skipped {msg}", file=sys.stderr)
    print(f"wrote {written} scenes with a PDM-Closed reference to {args.out} ({len(failed)} unreadable)")
    return 3 if failed else 0
