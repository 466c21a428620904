"""DriveJudge GRPO on labelled scenes, CPU preset: ``judge_grpo_margin_tiny.py`` (margin reward, batch-scaled
advantages) from the labelled-scenes SFT judge (``judge_sft_labels_tiny.py``), with its longer prompts, and no evaluation on the
held-out split during training (the export is the last step's model; nothing is chosen on the held-out scenes).

    jaxdrive train grpo --config configs/judge_grpo_labels_tiny.py model.path=runs/judge_sft_labels \
        data.path=runs/jl export_dir=runs/judge_grpo_labels
"""
from jaxdrive.configs import sibling_config


def get_config():
    c = sibling_config(__file__, "judge_grpo_margin_tiny")
    c.data.max_len = c.eval_data.max_len = 640
    c.eval_every = 0  # no evaluation during training: the held-out split is read once, by `jaxdrive judge run`
    return c
