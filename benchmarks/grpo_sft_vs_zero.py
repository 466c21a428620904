"""GRPO from an SFT warm start vs from zero-shot on the tiny verifiable task ("is the image bright?").

Writes both reward curves (per-step mean training reward, greedy eval reward) to a JSONL file and prints a summary.

    python benchmarks/grpo_sft_vs_zero.py --steps 100 --out runs/grpo_sft_vs_zero.jsonl
"""
import argparse
import json
import os
import time

import numpy as np

from jaxdrive.train import jobs
from jaxdrive.train.tiny_recipes import tiny_vlm, warm_vs_zero_configs


def curves(steps: int, sft_steps: int, eval_every: int, lr: float | None):
    s, g = warm_vs_zero_configs(steps, sft_steps)
    if lr:
        g.optim.lr = lr
    g.eval_every, g.log_every = eval_every, 10**9
    t0 = time.perf_counter()
    sft_trainer, sft_records = jobs.run_sft(s)
    runs = {"sft_warm": sft_trainer.model(), "zero_shot": tiny_vlm(g.model.seed)}
    out = {"sft_loss": [r["loss"] for r in sft_records], "sft_time_s": time.perf_counter() - t0}
    for name, model in runs.items():
        t0 = time.perf_counter()
        trainer, records = jobs.run_grpo(g, model=model)
        out[name] = records
        out[f"{name}_eval"] = [r for r in trainer.history if "eval/greedy/reward_mean" in r]
        out[f"{name}_time_s"] = time.perf_counter() - t0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="GRPO steps of each run (default: 100)")
    ap.add_argument("--sft-steps", type=int, default=40, help="steps of the format-SFT warm start (default: 40)")
    ap.add_argument("--eval-every", type=int, default=10,
                    help="GRPO steps between greedy evaluations (default: 10)")
    ap.add_argument("--lr", type=float, default=None, help="GRPO learning rate (default: configs/grpo_tiny.py)")
    ap.add_argument("--out", default="runs/grpo_sft_vs_zero.jsonl",
                    help="JSONL file for both reward curves (default: runs/grpo_sft_vs_zero.jsonl)")
    a = ap.parse_args()
    res = curves(a.steps, a.sft_steps, a.eval_every, a.lr)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        for name in ("sft_warm", "zero_shot"):
            for r in res[name] + [r for r in res[f"{name}_eval"] if r["step"] == 0]:
                f.write(json.dumps({"run": name, **r}) + "\n")
    print(f"format-SFT warm start: loss {res['sft_loss'][0]:.3f} -> {res['sft_loss'][-1]:.3f} "
          f"({len(res['sft_loss'])} steps, {res['sft_time_s']:.0f}s)")
    for name in ("sft_warm", "zero_shot"):
        rew = np.array([r["reward_mean"] for r in res[name]])
        k = max(1, len(rew) // 10)
        ev = [(r["step"], r["eval/greedy/reward_mean"]) for r in res[f"{name}_eval"]]
        print(f"{name:10s} train reward first {k} steps {rew[:k].mean():.3f} -> last {k} steps {rew[-k:].mean():.3f}; "
              f"zero-std groups {np.mean([r['zero_std_frac'] for r in res[name]]):.2f}; "
              f"greedy eval {ev[0][1]:.3f} -> {ev[-1][1]:.3f}; {res[f'{name}_time_s']:.0f}s")
        print(f"  curve (every {k}): " + " ".join(f"{rew[i:i + k].mean():.2f}" for i in range(0, len(rew), k)))
        print("  greedy eval: " + " ".join(f"{s}:{v:.2f}" for s, v in ev))


if __name__ == "__main__":
    main()
