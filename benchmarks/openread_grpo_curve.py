"""Reward curve of an OpenREAD GRPO run (``metrics.jsonl`` of ``jaxdrive train grpo``) against a control run.

Prints, for the total reward R = R_know + R_traj + R_format and each part, the mean over the first and the last
``--window`` steps of the run, of the control (the same config with lr = 0: same prompts per step and same sampling
keys, so it measures what the prompts drawn in a window are worth to the cold-start policy) and the run minus the
control; then the greedy evaluation reward at each evaluation step. ``--plot`` writes the curves as a png.

    python benchmarks/openread_grpo_curve.py RUN_DIR --control CONTROL_DIR --window 20 --plot curve.png
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

PARTS = {"total": "train/reward_mean", "know": "train/reward/know", "traj": "train/reward/traj",
         "format": "train/reward/format"}
GREEDY = "eval/greedy/reward_mean"


def read_metrics(run_dir: str | Path) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """({part: [steps] train values}, eval steps, greedy eval rewards) of a run directory."""
    train, evals = {}, {}
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if PARTS["total"] in row:
            train[row["step"]] = [row.get(k, np.nan) for k in PARTS.values()]
        if GREEDY in row:
            evals[row["step"]] = row[GREEDY]
    if not train:
        raise ValueError(f"{run_dir}/metrics.jsonl: no train/reward_mean rows")
    steps = sorted(train)
    values = np.asarray([train[s] for s in steps], np.float64)
    out = {name: values[:, i] for i, name in enumerate(PARTS)}
    out["step"] = np.asarray(steps)
    e = sorted(evals)
    return out, np.asarray(e), np.asarray([evals[s] for s in e])


def window_means(curve: np.ndarray, window: int) -> tuple[float, float]:
    """(mean of the first ``window`` values, mean of the last ``window`` values)."""
    if len(curve) < 2 * window:
        raise ValueError(f"--window {window}: the run has {len(curve)} steps, need at least {2 * window}")
    return float(np.nanmean(curve[:window])), float(np.nanmean(curve[-window:]))


def rolling(curve: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over up to ``window`` steps."""
    c = np.nancumsum(curve)
    n = np.arange(1, len(curve) + 1)
    lo = np.maximum(n - window, 0)
    return (c - np.concatenate([[0.0], c])[lo]) / (n - lo)


def trend(d: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of ``d`` against the step index and its standard error (independent residuals)."""
    x = np.arange(len(d), dtype=np.float64)
    a = np.stack([np.ones_like(x), x], 1)
    coef, *_ = np.linalg.lstsq(a, d, rcond=None)
    resid = d - a @ coef
    cov = resid @ resid / (len(d) - 2) * np.linalg.inv(a.T @ a)
    return float(coef[1]), float(np.sqrt(cov[1, 1]))


def window_table(run: np.ndarray, control: np.ndarray, window: int) -> list[tuple[int, float, float, float, float]]:
    """Per consecutive ``window``-step block (a last partial block is dropped): (first step index, mean of the run,
    mean of the control, mean of the paired per-step difference run - control, its standard error)."""
    n = min(len(run), len(control))
    rows = []
    for lo in range(0, n - window + 1, window):
        d = run[lo:lo + window] - control[lo:lo + window]
        rows.append((lo, float(np.mean(run[lo:lo + window])), float(np.mean(control[lo:lo + window])),
                     float(d.mean()), float(d.std(ddof=1) / np.sqrt(window))))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="workdir of the GRPO run (holds metrics.jsonl)")
    p.add_argument("--control", help="workdir of the lr = 0 control run")
    p.add_argument("--window", type=int, default=20, help="steps per window of the first / last means and the "
                   "table of blocks (default: 20)")
    p.add_argument("--plot", help="png path for the curves")
    args = p.parse_args(argv)
    runs = {"grpo": read_metrics(args.run)}
    if args.control:
        runs["control"] = read_metrics(args.control)
    if args.control:  # compare the same steps: both runs cut to the steps they have in common
        n = min(len(train["total"]) for train, _, _ in runs.values())
        last = min(train["step"][n - 1] for train, _, _ in runs.values())
        runs = {name: ({k: v[:n] for k, v in train.items()}, es[es <= last], ev[es <= last])
                for name, (train, es, ev) in runs.items()}
    w = args.window
    print(f"mean train reward over the first / last {w} steps ({len(runs['grpo'][0]['step'])} steps)")
    print(f"{'part':8s} " + " ".join(f"{name + ' first':>14s} {name + ' last':>13s} {'rise':>7s}" for name in runs)
          + ("   rise over control" if args.control else ""))
    for part in PARTS:
        cells, rises = [], []
        for name, (train, _, _) in runs.items():
            a, b = window_means(train[part], w)
            cells.append(f"{a:14.3f} {b:13.3f} {b - a:+7.3f}")
            rises.append(b - a)
        extra = f"   {rises[0] - rises[1]:+.3f}" if args.control else ""
        print(f"{part:8s} " + " ".join(cells) + extra)
    if args.control:
        n = min(len(runs["grpo"][0]["total"]), len(runs["control"][0]["total"]))
        d = runs["grpo"][0]["total"][:n] - runs["control"][0]["total"][:n]
        print(f"paired per-step difference run - control of R (same prompts and keys per step), {n} steps:")
        for label, seg in (("first", d[:w]), ("last", d[-w:]), ("all", d)):
            print(f"  {label:5s} {len(seg):3d} steps: mean {seg.mean():+.3f}, SE {seg.std(ddof=1) / np.sqrt(len(seg)):.3f} "
                  f"({seg.mean() / (seg.std(ddof=1) / np.sqrt(len(seg))):+.1f} SE)")
        slope, se = trend(d)
        print(f"  linear trend of the difference: {100 * slope:+.3f} per 100 steps, SE {100 * se:.3f} "
              f"({slope / se:+.1f} SE)")
    if args.control:
        print(f"per-window means of R ({w} steps each) and the paired difference run - control with its SE:")
        print(f"{'steps':>9s} {'grpo':>7s} {'control':>8s} {'diff':>7s} {'SE':>6s} {'diff/SE':>8s}")
        for lo, g, c, dm, se in window_table(runs["grpo"][0]["total"], runs["control"][0]["total"], w):
            print(f"{lo + 1:4d}-{lo + w:<4d} {g:7.3f} {c:8.3f} {dm:+7.3f} {se:6.3f} {dm / se:+8.1f}")
    for name, (_, es, ev) in runs.items():
        if len(es):
            print(f"greedy eval reward ({name}): " + ", ".join(f"step {s}: {v:.3f}" for s, v in zip(es, ev)))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 4 if args.control else 3, figsize=(20 if args.control else 15, 4))
        styles = {"grpo": "-", "control": ":"}
        for name, (train, es, ev) in runs.items():
            axes[0].plot(train["step"], rolling(train["total"], w), styles[name], color="k",
                         label=f"{name} (rolling mean {w})")
            axes[0].plot(train["step"], train["total"], styles[name], color="k", alpha=0.15)
            for part, colour in (("know", "tab:blue"), ("traj", "tab:orange"), ("format", "tab:green")):
                axes[1].plot(train["step"], rolling(train[part], w), styles[name], color=colour, label=f"{part} ({name})")
            if len(es):
                axes[2].plot(es, ev, styles[name], marker="o", color="k", label=name)
        if args.control:
            tab = window_table(runs["grpo"][0]["total"], runs["control"][0]["total"], w)
            steps0 = runs["grpo"][0]["step"]
            axes[3].errorbar([steps0[lo] + (w - 1) / 2 for lo, *_ in tab], [r[3] for r in tab],
                             yerr=[r[4] for r in tab], marker="o", color="k", capsize=3, label="run - control (±1 SE)")
            axes[3].axhline(0.0, color="grey", lw=0.8)
            axes[3].set_title(f"paired difference of R per {w}-step window")
        axes[0].set_title("train reward R = R_know + R_traj + R_format")
        axes[1].set_title(f"reward parts (rolling mean {w})")
        axes[2].set_title("greedy reward on the fixed eval prompts")
        for ax in axes:
            ax.set_xlabel("GRPO step")
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
