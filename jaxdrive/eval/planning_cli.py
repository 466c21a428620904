"""``jaxdrive eval planning --predictions P --gt G``: L2 and collision at 1/2/3 s and their average, in each convention
(UniAD, ST-P3, VAD: ``planning.CONVENTIONS``).

Inputs (metric frame x right / y forward unless ``--frame text``):
  * predictions: ``.npz`` with ``pred`` [N, 6, 2] (and optionally ``tokens`` [N] str), or ``.json``
    ``{token: [[x, y] x 6] | "(x1, y1), ..., (x6, y6)"}`` (strings are model answers in OpenREAD's text format and
    are read with ``trajectory_text.parse_trajectory``). A token appears once.
  * GT: ``.npz`` with ``gt`` [N, 6, 2], ``gt_mask`` [N, 6] (optional), ``occupancy`` bool [N, 6, 200, 200] or class
    layers ``occupancy_vehicle`` / ``occupancy_pedestrian`` (``--obstacles`` picks the variant), and ``tokens`` [N]
    (unique) when the predictions are keyed by token.
A GT sample without a usable prediction (none given, or an unparsable / malformed one) is reported and left out of
the metrics: the rates are over the samples scored. A prediction whose token is not in the GT is reported too.
Exit codes: 0 ok, 2 bad inputs (named), 3 finished but some samples or predictions were reported (scored on the rest).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np

from jaxdrive import atomic
from jaxdrive.errors import UserInputError
from jaxdrive.eval import planning
from jaxdrive.eval.trajectory_text import parse_trajectory

EXIT_USAGE, EXIT_PARTIAL = 2, 3


def add_planning_parser(subparsers) -> argparse.ArgumentParser:
    """Registers ``jaxdrive eval planning``."""
    p = subparsers.add_parser("planning", help="open-loop planning metrics (L2, collision) in the UniAD, ST-P3 "
                              "and VAD conventions")
    p.add_argument("--predictions", type=Path, required=True, help=".npz (pred, tokens) or .json {token: traj}")
    p.add_argument("--gt", type=Path, required=True, help=".npz (gt, gt_mask, occupancy or occupancy_<class>, tokens)")
    p.add_argument("--frame", choices=["lidar", "text"], default="lidar",
                   help="frame of numeric predictions: lidar (x right, y forward) or OpenREAD text (x forward, y left);"
                        " string answers are always in the text frame")
    p.add_argument("--obstacles", choices=sorted(planning.OBSTACLE_VARIANTS),
                   help="obstacle classes when the GT file has per-class occupancy layers (default: vehicle; an error "
                        "when it holds one combined 'occupancy' array)")
    p.add_argument("--occupancy-layout", choices=sorted(planning.OCCUPANCY_LAYOUTS), default="uniad",
                   help="stored layout of the GT occupancy")
    p.add_argument("--l2-unmasked", action="store_true",
                   help="L2 ignores the GT's gt_mask, as ST-P3's own PlanningMetric (default: masked, as UniAD)")
    p.add_argument("--json", type=Path, help="also write the metrics (every convention) to this JSON file")
    p.set_defaults(func=run_planning)
    return p


def _load_npz(path: Path, what: str) -> dict:
    """{name: array} of the ``.npz`` ``what`` (the flag) names; ``npz_arrays.read_npz_arrays``' errors."""
    from jaxdrive.npz_arrays import read_npz_arrays

    return read_npz_arrays(path, what, "the named arrays --help lists")


def _check_array(arrays: dict, key: str, shape: tuple, what: str, *, numeric: bool = True) -> np.ndarray:
    """``arrays[key]`` after checking its shape (None = any size) and, when ``numeric``, that it holds real numbers;
    ValueError naming ``what`` (the flag and file) and the key otherwise."""
    a = arrays[key]
    ok = a.ndim == len(shape) and all(want is None or got == want for got, want in zip(a.shape, shape))
    if not ok:
        dims = ", ".join("N" if d is None else str(d) for d in shape)
        raise UserInputError(f"{what}: '{key}' expected shape [{dims}], got {a.shape}")
    real = (np.issubdtype(a.dtype, np.number) or a.dtype == bool) and not np.iscomplexobj(a)
    if numeric and not real:
        raise UserInputError(f"{what}: '{key}' expected numbers, got dtype {a.dtype}")
    return a


def _check_gt_file(gt: dict, path: Path) -> None:
    """The arrays of the --gt file agree with its 'gt' [N, 6, 2]: 'gt_mask' [N, 6], 'tokens' [N], every occupancy
    array [N, 6, 200, 200] (an array of another length was an IndexError, a 0-d 'gt' a TypeError)."""
    what = f"--gt {path}"
    if "gt" not in gt:
        raise UserInputError(f"{what}: no 'gt' array (have {sorted(gt)})")
    n = len(_check_array(gt, "gt", (None, planning.STEPS, 2), what))
    if n == 0:
        raise UserInputError(f"{what}: 'gt' holds no samples")
    if "gt_mask" in gt:
        _check_array(gt, "gt_mask", (n, planning.STEPS), what)
    if "tokens" in gt:
        _check_array(gt, "tokens", (n,), what, numeric=False)
    for key in [k for k in gt if k == "occupancy" or k.startswith("occupancy_")]:
        _check_array(gt, key, (n, planning.STEPS, planning.GRID, planning.GRID), what)


def _unique_tokens(tokens, what: str) -> list[str]:
    """``tokens`` as strings, or ValueError naming ``what`` when one appears twice."""
    tokens = list(map(str, tokens))
    repeated = sorted(t for t, count in collections.Counter(tokens).items() if count > 1)
    if repeated:
        raise UserInputError(f"{what}: token(s) {repeated[:5]} appear more than once (each sample once)")
    return tokens


def _no_repeated_keys(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    _unique_tokens(keys, "--predictions")
    return dict(pairs)


def _points(v) -> np.ndarray | None:
    """A JSON trajectory as [6, 2] float64, or None when it is not 6 [x, y] points of JSON numbers (not booleans or
    strings, which numpy would convert) finite in float32, the metric's precision (ragged lists included)."""
    if not (isinstance(v, list) and len(v) == 6 and all(isinstance(p, list) and len(p) == 2 for p in v)):
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for p in v for x in p):
        return None
    try:
        with np.errstate(over="ignore"):
            pts = np.asarray(v, np.float64)
            return pts if np.isfinite(pts.astype(np.float32)).all() else None
    except OverflowError:  # an integer beyond float64
        return None


def load_predictions(path: Path, frame: str) -> tuple[dict | np.ndarray, dict[str, str]]:
    """(predictions, {token: why it is unusable}): an array [N, 6, 2] (npz without tokens) or {token: [6, 2]} in the
    metric frame. A token given twice is an error."""
    errors = {}
    if path.suffix == ".json":
        try:
            raw = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_no_repeated_keys)
        except UnicodeDecodeError as e:
            raise UserInputError(f"--predictions {path}: not UTF-8 text ({e})") from None
        except (OSError, json.JSONDecodeError) as e:
            raise UserInputError(f"--predictions {path}: cannot read JSON ({e})") from None
        if not isinstance(raw, dict):
            raise UserInputError(f"--predictions {path}: expected a JSON object {{token: trajectory}}")
        out = {}
        for token, v in raw.items():
            if isinstance(v, str):
                pts = parse_trajectory(v)
                if pts is None:
                    errors[token] = f"unparsable trajectory text {v[:60]!r}"
                    continue
                out[token] = planning.text_to_lidar(pts)
                continue
            pts = _points(v)
            if pts is None:
                errors[token] = "expected 6 [x, y] points of finite numbers"
                continue
            out[token] = planning.text_to_lidar(pts) if frame == "text" else pts
        return out, errors
    z = _load_npz(path, "--predictions")
    if "pred" not in z:
        raise UserInputError(f"--predictions {path}: no 'pred' array (have {sorted(z)})")
    n = len(_check_array(z, "pred", (None, planning.STEPS, 2), f"--predictions {path}"))
    pred = planning.text_to_lidar(z["pred"]) if frame == "text" else z["pred"]
    if "tokens" in z:
        _check_array(z, "tokens", (n,), f"--predictions {path}", numeric=False)
        return dict(zip(_unique_tokens(z["tokens"], f"--predictions {path}"), pred)), errors
    return pred, errors


def _align(pred, unusable: dict[str, str], gt: dict, what: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(pred [N, 6, 2], rows of the GT file kept, one report line per GT sample left out or prediction unmatched)."""
    n = len(gt["gt"])
    if not isinstance(pred, dict):
        if len(pred) != n:
            raise UserInputError(f"--predictions: {len(pred)} trajectories but --gt {what} has {n} samples (add tokens)")
        return np.asarray(pred, np.float32), np.arange(n), []
    if "tokens" not in gt:
        raise UserInputError(f"--gt {what}: predictions are keyed by token but the GT file has no 'tokens' array")
    tokens = _unique_tokens(gt["tokens"], f"--gt {what}")
    keep = [i for i, t in enumerate(tokens) if t in pred]
    report = [f"{t}: {unusable.get(t, 'no prediction')}" for t in tokens if t not in pred]
    known = set(tokens)
    report += [f"{t}: a prediction for a token not in --gt" for t in list(pred) + list(unusable) if t not in known]
    if not keep:
        why = f" ({len(report)} reported, e.g. {report[0]})" if report else ""
        raise UserInputError(f"--predictions: no usable prediction for a token of --gt {what}{why}")
    return np.stack([pred[tokens[i]] for i in keep]).astype(np.float32), np.asarray(keep), report


def _occupancy(gt: dict, args) -> np.ndarray:
    """The stored GT occupancy [N, 6, 200, 200] of the obstacle classes ``--obstacles`` names."""
    if "occupancy" in gt:
        if args.obstacles is not None:
            raise UserInputError(f"--obstacles {args.obstacles}: --gt {args.gt} holds one combined 'occupancy' array, "
                             f"not per-class 'occupancy_<class>' layers to choose from")
        return gt["occupancy"]
    layers = {k[len("occupancy_"):]: v for k, v in gt.items() if k.startswith("occupancy_")}
    if not layers:
        raise UserInputError(f"--gt {args.gt}: no 'occupancy' or 'occupancy_<class>' arrays (have {sorted(gt)})")
    return planning.obstacle_occupancy(layers, args.obstacles or "vehicle")


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


def _metrics(pred, truth, occ, mask, args) -> dict[str, dict]:
    """{convention: metrics} of every convention; "vad" is left out (with a note) when no sample is complete. A
    ValueError names the file of the array it is about."""
    results = {}
    for c in planning.CONVENTIONS:
        try:
            results[c] = planning.planning_metrics(pred, truth, occ, gt_mask=mask, convention=c,
                                                   l2_masked=not args.l2_unmasked)
        except ValueError as e:
            if c == "vad" and results:  # the other conventions passed the same checks: no complete sample
                print(f"jaxdrive eval planning: vad left out: {e}", file=sys.stderr)
                continue
            flag = f"--predictions {args.predictions}" if str(e).startswith("pred") else f"--gt {args.gt}"
            raise UserInputError(f"{flag}: {e}") from None
    return results


def run_planning(args) -> int:
    from jaxdrive.output_paths import output_file, output_not_input

    output_file("--json", args.json)
    output_not_input("--json", args.json, {"--predictions": [args.predictions], "--gt": [args.gt]})
    pred, errors = load_predictions(args.predictions, args.frame)
    gt = _load_npz(args.gt, "--gt")
    _check_gt_file(gt, args.gt)
    pred, keep, report = _align(pred, errors, gt, args.gt)
    mask = gt["gt_mask"][keep] if "gt_mask" in gt else None
    pred, truth, occ = planning.in_layout(pred, gt["gt"][keep], _occupancy(gt, args)[keep], args.occupancy_layout)
    results = _metrics(pred, truth, occ, mask, args)
    print(format_table(results))
    left_out = len(gt["gt"]) - len(keep)
    print(f"samples: {len(keep)}" + (f" ({left_out} of the GT's left out: no usable prediction)" if left_out else ""))
    if "vad" in results and results["vad"]["num_excluded"]:
        print(f"vad: over the {results['vad']['num_samples']} samples with a complete GT future "
              f"({results['vad']['num_excluded']} left out)")
    if args.json:
        atomic.write_text(args.json, json.dumps({c: {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                                     for k, v in r.items()} for c, r in results.items()}, indent=2))
    for line in report:
        print(f"prediction {line}", file=sys.stderr)
    return EXIT_PARTIAL if report else 0
