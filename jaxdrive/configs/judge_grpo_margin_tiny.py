"""DriveJudge GRPO, CPU preset with the margin reward: ``judge_grpo_tiny.py`` with ``rewards.judge_margin`` (the
preferred trajectory's sampled gated score minus the other's, whose rollout mean is the expected-score margin)
instead of Eq. 12's 0/1, and advantages scaled by the batch's reward std instead of each group's (a group whose
margins differ by a rounding-sized amount is not blown up to unit advantages).

On the tiny judge from its 300-step SFT checkpoint, 100 steps on ~1,000 pairs, this is the GRPO that raised held-out
TPS accuracy in a pre-registered test where plain Eq. 12 GRPO did not (docs/drivejudge.md, "GRPO from the 300-step
SFT judge").

    jaxdrive train grpo --config configs/judge_grpo_margin_tiny.py model.path=runs/judge_sft_tiny data.path=runs/jd \
        export_dir=runs/judge_grpo_margin_tiny
"""

import ml_collections

from jaxdrive.configs import sibling_config


def get_config():
    c = sibling_config(__file__, "judge_grpo_tiny")
    c.rewards = ml_collections.ConfigDict({"judge_margin": dict(weight=1.0)})  # registry.REWARDS
    c.grpo.scale = "batch"
    return c
