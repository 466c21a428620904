"""The VLM direct-score baseline (paper Table 3, VLM-DirectScore-Ft), CPU preset: the tiny judge directory fine-tuned
to answer ``Reasonable: yes|no`` for the whole trajectory (dataset ``judge_direct``); same model, data and schedule
as configs/judge_sft_tiny.py, so the two differ only in what the VLM is asked.

    jaxdrive train sft --config configs/judge_direct_sft_tiny.py model.path=runs/tiny_judge data.path=runs/jd \
        export_dir=runs/direct_sft
    jaxdrive judge baselines --data runs/jd --direct-model runs/direct_sft
"""
from jaxdrive.configs import sibling_config


def get_config():
    c = sibling_config(__file__, "judge_sft_tiny")
    c.data.kind = "judge_direct"
    return c
