"""DriveJudge SFT on labelled scenes (``jaxdrive judge data --scenes DIR --labels L.jsonl``), CPU preset: the tiny
judge, the text description (the scene-context facts of ``judge.context``, with the rule checks), the balanced
sampler, the seven gate slots as targets. ``benchmarks/judge_labels.sh`` runs it; on a pod set ``model.path`` to a
Qwen2.5-VL / Qwen3-VL directory and use ``configs/judge_sft.py`` with ``data.describe=True``.

    jaxdrive train sft --config configs/judge_sft_labels_tiny.py model.path=runs/tiny_judge data.path=runs/jl \
        export_dir=runs/judge_sft_labels
"""
from jaxdrive.configs import sibling_config


def get_config():
    c = sibling_config(__file__, "judge_sft_tiny")
    c.data.describe = True
    c.data.balance = True
    c.steps = 600  # held-out validation inside the training scenes: 300 steps 76.84, 600 steps 78.07 challenging AUC
    c.data.max_len = 640  # ~520 tokens with the tiny judge's tokenizer, the description and the rule checks
    return c
