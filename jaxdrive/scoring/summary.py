"""Human-facing results of a scoring run: a summary table on stdout and a PNG of score histograms / shares below 1.

Both always describe the whole run: ``whole_run_stats`` reads back every shard the manifest names (earlier
invocations' too, after ``--resume``), with this invocation's timings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxdrive.metrics import LABELS
from jaxdrive.scoring.outputs import iter_shard_columns, run_errors
from jaxdrive.scoring.runner import AGGREGATES, METRICS, RunStats

NAMES = LABELS


_W = 30  # name column width: the longest name + code fits
INPUT_BOUND_SHARE = 0.5  # the summary names a run input-bound when its loop waited for scenes this share of the time


def whole_run_stats(out_dir: str | Path, live: RunStats) -> RunStats:
    """The statistics of every completed shard of ``out_dir`` (read back) with ``live``'s timings and resume count."""
    stats = RunStats(compile_s=live.compile_s, score_s=live.score_s, scored_after_compile=live.scored_after_compile,
                     skipped_shards=live.skipped_shards, input_wait_s=live.input_wait_s, scored=live.scored,
                     wall_s=live.wall_s, unread=len(live.errors))
    for cols in iter_shard_columns(out_dir):
        stats.add(cols)
        stats.scenes += len(np.unique(cols["scene_id"]))
    stats.errors = [dict(e) for e in run_errors(out_dir)]
    return stats


def summary_table(stats: RunStats, processes: int = 1) -> str:
    """The run's table: mean and share of proposals below 1 per sub-metric, aggregates, counts and throughput. The
    timings are this invocation's, or with ``processes`` > 1 those of process 0 (which prints the table)."""
    who = "this invocation" if processes == 1 else f"process 0 of {processes}"
    rule = "-" * (_W + 34)
    lines = [f"{'metric':<{_W}}{'mean':>10}{'share < 1':>12}{'n':>12}", rule]
    for m in METRICS + AGGREGATES:
        share = f"{100 * stats.rate(m):.2f}%" if m in METRICS else ""
        lines.append(f"{NAMES[m] + ' (' + m + ')':<{_W}}{stats.mean(m):>10.4f}{share:>12}{stats.counts[m]:>12,}")
    lines.append(rule)
    lines.append("share < 1: proposals scoring below 1; a violation for the rule metrics,")
    lines.append("           progress short of the normaliser for the continuous ep")
    lines.append(f"scenes {stats.scenes:,}   proposals {stats.proposals:,}   not scored (errors.jsonl) {len(stats.errors)}"
                 + (f"   shards already complete (resumed) {stats.skipped_shards}" if stats.skipped_shards else ""))
    if stats.compile_s == 0.0:
        lines.append(f"{who} scored nothing: " + (
            f"none of the {stats.unread} scene(s) it read could be scored (errors.jsonl)" if stats.unread
            else "every shard was already complete" if processes == 1 else "its shards were already complete"))
    elif stats.score_s > 0:
        lines.append(f"{who}: first batch incl. compile {stats.compile_s:.2f} s   throughput after compile "
                     f"{stats.proposals_per_s:,.0f} proposals/s")
        lines.append(f"{'':{len(who) + 2}}end to end {stats.end_to_end_per_s:,.0f} proposals/s over {stats.wall_s:.1f} s "
                     "(prescan, compile and input included)")
        if stats.input_wait_s >= INPUT_BOUND_SHARE * stats.score_s:
            lines.append(f"input-bound: {100 * stats.input_wait_s / stats.score_s:.0f}% of that time went waiting for "
                         "scenes to be read or generated, not scoring;")
            lines.append("             --workers N (input processes) or a scene store (jaxdrive scenes convert, or")
            lines.append("             jaxdrive scenes generate --store) feeds the scorer faster")
    else:
        lines.append(f"{who}: one batch, {stats.compile_s:.2f} s incl. compile (too short for a throughput)")
    return "\n".join(lines)


def plot_summary(stats: RunStats, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    centres = 0.5 * (stats.hist_edges[1:] + stats.hist_edges[:-1])
    width = stats.hist_edges[1] - stats.hist_edges[0]
    for ax, m in zip(axes[:2], ("epdms", "ep")):
        ax.bar(centres, stats.hists[m], width=width * 0.95, color="#3b6ea8")
        ax.set_title(f"{NAMES[m]} — mean {stats.mean(m):.3f}")
        ax.set_xlabel(m)
        ax.set_ylabel("proposals")
        ax.set_xlim(0, 1)
    rates = [100 * stats.rate(m) for m in METRICS]
    bars = axes[2].barh([NAMES[m] for m in METRICS][::-1], rates[::-1], color="#c0504d")
    for b, r in zip(bars, rates[::-1]):
        axes[2].text(b.get_width(), b.get_y() + b.get_height() / 2, f" {r:.1f}%", va="center", fontsize=8)
    axes[2].set_xlabel("proposals below 1, % (ep: short of the normaliser)")
    axes[2].set_title("share below 1 per sub-metric")
    axes[2].set_xlim(0, max(5.0, max(np.nan_to_num(rates)) * 1.2))
    fig.suptitle(f"jaxdrive score: {stats.proposals:,} proposals in {stats.scenes:,} scenes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
