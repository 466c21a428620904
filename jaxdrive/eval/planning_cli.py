"""``jaxdrive eval planning --predictions P --gt G``: L2 and collision at 1/2/3 s and their average, both conventions.

Inputs (metric frame x right / y forward unless ``--frame text``):
  * predictions: ``.npz`` with ``pred`` [N, 6, 2] (and optionally ``tokens`` [N] str), or ``.json``
    ``{token: [[x, y] x 6] | "(x1, y1), ..., (x6, y6)"}`` (strings are model answers in OpenREAD's text format and
    are read with ``trajectory_text.parse_trajectory``; an unparsable answer is reported and counts as a failure).
  * GT: ``.npz`` with ``gt`` [N, 6, 2], ``gt_mask`` [N, 6] (optional), ``occupancy`` bool [N, 6, 200, 200] or class
    layers ``occupancy_vehicle`` / ``occupancy_pedestrian`` (``--obstacles`` picks the variant), and ``tokens`` [N]
    when the predictions are keyed by token.
Exit codes: 0 ok, 2 bad inputs (named), 3 finished but some predictions were unreadable (scored on the rest).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from jaxdrive.eval import planning
from jaxdrive.eval.trajectory_text import parse_trajectory

EXIT_USAGE, EXIT_PARTIAL = 2, 3


def add_planning_parser(subparsers) -> argparse.ArgumentParser:
    """Registers ``jaxdrive eval planning``."""
    p = subparsers.add_parser("planning", help="open-loop planning metrics (L2, collision) in the UniAD and ST-P3 "
                              "conventions", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--predictions", type=Path, required=True, help=".npz (pred, tokens) or .json {token: traj}")
    p.add_argument("--gt", type=Path, required=True, help=".npz (gt, gt_mask, occupancy or occupancy_<class>, tokens)")
    p.add_argument("--frame", choices=["lidar", "text"], default="lidar",
                   help="frame of numeric predictions: lidar (x right, y forward) or OpenREAD text (x forward, y left);"
                        " string answers are always in the text frame")
    p.add_argument("--obstacles", choices=sorted(planning.OBSTACLE_VARIANTS), default="vehicle",
                   help="obstacle classes when the GT file has per-class occupancy layers")
    p.add_argument("--occupancy-layout", choices=sorted(planning.OCCUPANCY_LAYOUTS), default="uniad",
                   help="stored layout of the GT occupancy")
    p.add_argument("--json", type=Path, help="also write the metrics (both conventions) to this JSON file")
    p.set_defaults(func=run_planning)
    return p


def _load_npz(path: Path, what: str) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ValueError(f"{what} {path}: cannot read .npz ({e})") from None


def load_predictions(path: Path, frame: str) -> tuple[dict | np.ndarray, list[str]]:
    """(predictions, errors): an array [N, 6, 2] (npz without tokens) or {token: [6, 2]} in the metric frame."""
    errors = []
    if path.suffix == ".json":
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"--predictions {path}: cannot read JSON ({e})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"--predictions {path}: expected a JSON object {{token: trajectory}}")
        out = {}
        for token, v in raw.items():
            if isinstance(v, str):
                pts = parse_trajectory(v)
                if pts is None:
                    errors.append(f"{token}: unparsable trajectory text {v[:60]!r}")
                    continue
                out[token] = planning.text_to_lidar(pts)
                continue
            pts = np.asarray(v, np.float64) if isinstance(v, list) else None
            if pts is None or pts.shape != (6, 2) or not np.isfinite(pts).all():
                errors.append(f"{token}: expected 6 finite [x, y] points")
                continue
            out[token] = planning.text_to_lidar(pts) if frame == "text" else pts
        return out, errors
    z = _load_npz(path, "--predictions")
    if "pred" not in z:
        raise ValueError(f"--predictions {path}: no 'pred' array (have {sorted(z)})")
    pred = planning.text_to_lidar(z["pred"]) if frame == "text" else z["pred"]
    if "tokens" in z:
        return dict(zip(map(str, z["tokens"]), pred)), errors
    return pred, errors


def _align(pred, gt: dict, what: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(pred [N, 6, 2], rows of the GT file kept, missing-token errors)."""
    n = len(gt["gt"])
    if not isinstance(pred, dict):
        if len(pred) != n:
            raise ValueError(f"--predictions: {len(pred)} trajectories but --gt {what} has {n} samples (add tokens)")
        return np.asarray(pred, np.float32), np.arange(n), []
    if "tokens" not in gt:
        raise ValueError(f"--gt {what}: predictions are keyed by token but the GT file has no 'tokens' array")
    tokens = list(map(str, gt["tokens"]))
    keep = [i for i, t in enumerate(tokens) if t in pred]
    errors = [f"{t}: no prediction" for t in tokens if t not in pred]
    if not keep:
        raise ValueError(f"--predictions: no token matches --gt {what}")
    return np.stack([pred[tokens[i]] for i in keep]).astype(np.float32), np.asarray(keep), errors


def _occupancy(gt: dict, args) -> np.ndarray:
    if "occupancy" in gt:
        occ = gt["occupancy"]
    else:
        layers = {k[len("occupancy_"):]: v for k, v in gt.items() if k.startswith("occupancy_")}
        if not layers:
            raise ValueError(f"--gt {args.gt}: no 'occupancy' or 'occupancy_<class>' arrays (have {sorted(gt)})")
        occ = planning.obstacle_occupancy(layers, args.obstacles)
    return planning.occupancy_to_uniad(occ, args.occupancy_layout)


def format_table(results: dict[str, dict]) -> str:
    """The usual table: one row per convention, L2 (m) and collision (%) at 1/2/3 s and their average."""
    head = f"{'convention':<11}" + "".join(f"{f'L2 {s}':>8}" for s in ("1s", "2s", "3s", "avg"))
    head += "".join(f"{f'Col% {s}':>10}" for s in ("1s", "2s", "3s", "avg"))
    lines = [head, "-" * len(head)]
    for conv, r in results.items():
        l2 = [r[f"l2_{s}s"] for s in planning.HORIZONS]
        col = [100 * r[f"collision_{s}s"] for s in planning.HORIZONS]
        lines.append(f"{conv:<11}" + "".join(f"{v:8.3f}" for v in l2 + [np.mean(l2)])
                     + "".join(f"{v:10.3f}" for v in col + [np.mean(col)]))
    return "\n".join(lines)


def run_planning(args) -> int:
    pred, errors = load_predictions(args.predictions, args.frame)
    gt = _load_npz(args.gt, "--gt")
    if "gt" not in gt:
        raise ValueError(f"--gt {args.gt}: no 'gt' array (have {sorted(gt)})")
    pred, keep, missing = _align(pred, gt, args.gt)
    occ = _occupancy(gt, args)[keep]
    mask = gt["gt_mask"][keep] if "gt_mask" in gt else None
    results = {c: planning.planning_metrics(pred, gt["gt"][keep], occ, gt_mask=mask, convention=c)
               for c in planning.CONVENTIONS}
    print(format_table(results))
    print(f"samples: {len(keep)}" + (f" ({len(errors) + len(missing)} without a usable prediction)" if errors or missing else ""))
    if args.json:
        args.json.write_text(json.dumps({c: {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in r.items()}
                                         for c, r in results.items()}, indent=2))
    for e in errors + missing:
        print(f"unreadable prediction {e}", file=sys.stderr)
    return EXIT_PARTIAL if errors or missing else 0

