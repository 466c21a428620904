"""DriveJudge GRPO, CPU preset: from the tiny SFT model directory, float32, short run, larger learning rate.

    jaxdrive train grpo --config configs/judge_grpo_tiny.py model.path=runs/judge_sft_tiny data.path=runs/jd \
        export_dir=runs/judge_grpo_tiny
"""
from jaxdrive.configs import sibling_config


def get_config():
    c = sibling_config(__file__, "judge_grpo")
    c.steps, c.log_every, c.eval_every = 60, 10, 20
    c.model.dtype = "float32"
    c.data.max_len = c.eval_data.max_len = 512
    c.grpo.prompts_per_step = 8
    c.optim.lr = 1e-4
    c.checkpoint.enabled = False
    return c
