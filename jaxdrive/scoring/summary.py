"""Human-facing results of a scoring run: a summary table on stdout and a PNG of score histograms / violation rates."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxdrive.scoring.runner import AGGREGATES, METRICS, RunStats

NAMES = {"nc": "no at-fault collision", "dac": "drivable area", "ddc": "driving direction", "tlc": "traffic light",
         "ep": "ego progress", "ttc": "time to collision", "lk": "lane keeping", "hc": "history comfort",
         "ec": "extended comfort", "pdm_score": "PDM score", "epdms": "EPDMS"}


def summary_table(stats: RunStats) -> str:
    lines = [f"{'metric':<24}{'mean':>10}{'violations':>12}{'n':>12}", "-" * 58]
    for m in METRICS + AGGREGATES:
        rate = f"{100 * stats.rate(m):.2f}%" if m in METRICS else ""
        lines.append(f"{NAMES[m] + ' (' + m + ')':<24}{stats.mean(m):>10.4f}{rate:>12}{stats.counts[m]:>12,}")
    lines.append("-" * 58)
    lines.append(f"scenes {stats.scenes:,}   proposals {stats.proposals:,}   unreadable scenes {len(stats.errors)}"
                 + (f"   shards resumed {stats.skipped_shards}" if stats.skipped_shards else ""))
    lines.append(f"first batch incl. compile {stats.compile_s:.2f} s   throughput after compile "
                 f"{stats.proposals_per_s:,.0f} proposals/s")
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
    axes[2].set_xlabel("proposals violating (value < 1), %")
    axes[2].set_title("violation rate per sub-metric")
    axes[2].set_xlim(0, max(5.0, max(np.nan_to_num(rates)) * 1.2))
    fig.suptitle(f"jaxdrive score: {stats.proposals:,} proposals in {stats.scenes:,} scenes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
