"""DriveJudge SFT, CPU preset: the tiny random judge directory (``jaxdrive.judge.tiny.save_tiny_judge``), float32,
short run, larger learning rate.

    python -c "from jaxdrive.judge.tiny import save_tiny_judge; save_tiny_judge('runs/tiny_judge')"
    jaxdrive train sft --config configs/judge_sft_tiny.py model.path=runs/tiny_judge data.path=runs/jd \
        export_dir=runs/judge_sft_tiny
"""
from jaxdrive.configs import sibling_config


def get_config():
    c = sibling_config(__file__, "judge_sft")
    c.steps, c.batch_size, c.log_every = 300, 16, 25
    c.model.dtype = "float32"
    c.data.max_len = 512  # ~350 tokens with the tiny judge's tokenizer and the text description
    c.data.pad_id = 256  # the test tokenizer's <|endoftext|>
    c.data.target = "slots"  # train exactly the seven gate slots the policy reads (all-yes context)
    c.optim.lr, c.optim.warmup_steps = 2e-3, 20
    c.checkpoint.enabled = False
    return c
