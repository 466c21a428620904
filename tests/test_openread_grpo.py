"""The OpenREAD recipe end to end through ``jaxdrive train``: tiny policy directory -> cold-start SFT with export ->
joint GRPO with the composite reward (critic + trajectory + format) for a few steps."""
import json
from pathlib import Path

import numpy as np
import pytest

from jaxdrive.cli import main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.slow  # three jitted programs (SFT step, generation, GRPO step) on a 1-layer model
def test_cold_start_then_joint_grpo_through_the_cli(tmp_path):
    from jaxdrive.train.openread_tiny import build_tiny_policy

    policy, cold, work = tmp_path / "policy", tmp_path / "cold", tmp_path / "grpo"
    build_tiny_policy(str(policy), vocab_size=600, num_scenes=6, hidden=32, layers=1)
    assert main(["train", "sft", "--config", str(CONFIGS / "openread_sft_tiny.py"), f"model.path={policy}", "steps=2",
                 "batch_size=4", "optim.warmup_steps=0", "data.num_scenes=3", "data.max_len=384", f"export_dir={cold}", "progress=False"]) == 0
    assert (cold / "model.safetensors").exists() and (cold / "tokenizer.json").exists()
    overrides = [f"model.path={cold}", f"workdir={work}", "steps=2", "progress=False", "log_every=1", "eval_every=2",
                 "grpo.prompts_per_step=2", "grpo.completion_len=12", "grpo.prompt_len=256",
                 "data.sources.planning.num_scenes=3", "data.sources.knowledge.num_scenes=2",
                 "eval_data.sources.planning.num_scenes=2", "eval_data.sources.knowledge.num_scenes=1",
                 "eval_data.sources.planning.max_examples=2", "eval_data.sources.knowledge.max_examples=2",
                 "rewards.openread_knowledge.w_semantic=0.0", "rewards.openread_knowledge.critic.batch_size=4",
                 "rewards.openread_knowledge.critic.kind=tiny"]
    assert main(["train", "grpo", "--config", str(CONFIGS / "openread_grpo_tiny.py"), *overrides]) == 0
    rows = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/reward_mean" in r]
    assert [r["step"] for r in train] == [1, 2]
    for r in train:
        for part in ("train/reward/know", "train/reward/traj", "train/reward/format"):
            assert np.isfinite(r[part])
        assert 0 <= r["train/reward/traj"] <= 3 and 0 <= r["train/reward/format"] <= 1
    assert any("eval/greedy/reward_mean" in r or "greedy/reward_mean" in r for r in rows)


def _curve_module():
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "openread_grpo_curve.py"
    spec = importlib.util.spec_from_file_location("openread_grpo_curve", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reward_curve_analysis_known_answers(tmp_path, capsys):
    """The curve script's paired analysis: per-window means, the paired difference with its SE, and the linear trend
    of the difference, on hand-made metrics.jsonl files (run = control + 0.01 step + alternating +-0.1)."""
    curve = _curve_module()
    steps = np.arange(1, 41)
    control = 1.0 + 0.5 * np.sin(steps)
    run = control + 0.01 * steps + np.where(steps % 2, 0.1, -0.1)
    for name, values in (("run", run), ("control", control)):
        (tmp_path / name).mkdir()
        rows = [{"step": int(s), "train/reward_mean": float(v), "train/reward/know": 0.0, "train/reward/traj": 0.0,
                 "train/reward/format": 1.0} for s, v in zip(steps, values)]
        rows.insert(20, {"step": 20, "eval/greedy/reward_mean": 2.0})
        (tmp_path / name / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    train, es, ev = curve.read_metrics(tmp_path / "run")
    assert list(train["step"]) == list(steps) and list(es) == [20] and list(ev) == [2.0]
    tab = curve.window_table(run, control, 10)
    assert [r[0] for r in tab] == [0, 10, 20, 30]
    d = run - control
    for lo, g, c, dm, se in tab:
        assert g == pytest.approx(run[lo:lo + 10].mean()) and c == pytest.approx(control[lo:lo + 10].mean())
        assert dm == pytest.approx(d[lo:lo + 10].mean()) and se == pytest.approx(d[lo:lo + 10].std(ddof=1) / np.sqrt(10))
    slope, se = curve.trend(d)
    assert slope == pytest.approx(np.polyfit(steps, d, 1)[0]) and slope == pytest.approx(0.01, abs=1e-3)
    assert 0 < se < 2e-3
    assert curve.trend(0.5 * np.arange(10.0)) == (pytest.approx(0.5), pytest.approx(0.0, abs=1e-12))
    assert curve.main([str(tmp_path / "run"), "--control", str(tmp_path / "control"), "--window", "10"]) == 0
    out = capsys.readouterr().out
    assert f"linear trend of the difference: {100 * slope:+.3f} per 100 steps, SE {100 * se:.3f}" in out
    assert " 31-40 " in out
