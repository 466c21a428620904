#!/usr/bin/env bash
# DriveJudge on the synthetic labelled set with the tiny judge on CPU: data, baselines, SFT, GRPO, the VLM
# direct-score baseline, and the table of benchmarks/judge_table.py (gate perfect match, DQC AUC, TPS accuracy).
# Usage: benchmarks/judge_synthetic.sh OUT [TRAIN_SCENES TEST_SCENES SFT_STEPS GRPO_STEPS DIRECT_STEPS]
# Every run uses the text scene description (the ablation that makes a tiny random model learnable on CPU; the
# 64-pixel BEV alone carries pedestrians as single pixels) and the tiny judge's learnt tokenizer.
set -euo pipefail
OUT=${1:?output directory}; TRAIN=${2:-160}; TEST=${3:-40}; SFT_STEPS=${4:-300}; GRPO_STEPS=${5:-30}
DIRECT_STEPS=${6:-150}
COMMON="data.describe=True progress=False"
[ -f "$OUT/data/records.jsonl" ] || jaxdrive judge data --out "$OUT/data" --train "$TRAIN" --test "$TEST" --seed 1 --no-progress
[ -f "$OUT/tiny_judge/config.json" ] || python -m jaxdrive.judge.tiny "$OUT/tiny_judge" 64 2
jaxdrive train sft --config configs/judge_sft_tiny.py model.path="$OUT/tiny_judge" data.path="$OUT/data" $COMMON \
  steps=$SFT_STEPS batch_size=16 workdir="$OUT/sft_run" export_dir="$OUT/sft_model"
jaxdrive train sft --config configs/judge_direct_sft_tiny.py model.path="$OUT/tiny_judge" data.path="$OUT/data" \
  $COMMON steps=$DIRECT_STEPS batch_size=16 optim.warmup_steps=10 workdir="$OUT/direct_run" export_dir="$OUT/direct_model"
jaxdrive judge baselines --data "$OUT/data" --split test --direct-model "$OUT/direct_model" --describe
jaxdrive train grpo --config configs/judge_grpo_tiny.py model.path="$OUT/sft_model" data.path="$OUT/data" \
  $COMMON eval_data.describe=True steps=$GRPO_STEPS eval_every=10 workdir="$OUT/grpo_run" \
  export_dir="$OUT/grpo_model"
for m in zero_shot:tiny_judge sft:sft_model grpo:grpo_model; do
  jaxdrive judge run --model "$OUT/${m#*:}" --data "$OUT/data" --out "$OUT/${m%%:*}" --describe --batch-size 16 \
    --no-progress
done
B="$OUT/data/baselines"
jaxdrive eval dqc --predictions "$B/test_dqc_epdms.parquet" "$B/test_dqc_logreg.parquet" \
  "$B/test_dqc_logreg_gates.parquet" "$B/test_dqc_direct.parquet" "$OUT/zero_shot/dqc.parquet" \
  "$OUT/sft/dqc.parquet" "$OUT/grpo/dqc.parquet" "$B/test_dqc_oracle.parquet" \
  --names EPDMS Non-VLM Non-VLM-Agent VLM-DirectScore-Ft DriveJudge-zero-shot DriveJudge-SFT DriveJudge-SFT+GRPO \
  Oracle-gates --plot "$OUT/dqc.png"
jaxdrive eval tps --predictions "$B/test_tps_epdms.parquet" "$B/test_tps_ade.parquet" "$B/test_tps_fde.parquet" \
  "$B/test_tps_logreg.parquet" "$B/test_tps_logreg_gates.parquet" "$B/test_tps_direct.parquet" \
  "$OUT/zero_shot/tps.parquet" "$OUT/sft/tps.parquet" "$OUT/grpo/tps.parquet" "$B/test_tps_oracle.parquet" \
  --names EPDMS ADE FDE Non-VLM Non-VLM-Agent VLM-DirectScore-Ft DriveJudge-zero-shot DriveJudge-SFT \
  DriveJudge-SFT+GRPO Oracle-gates
python benchmarks/judge_table.py "$OUT"
