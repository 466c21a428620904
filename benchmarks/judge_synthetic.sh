#!/usr/bin/env bash
# DriveJudge on the synthetic labelled set with the tiny judge on CPU: data, baselines, SFT (a short cold start, then
# more steps from it, then LONG_SFT_STEPS more from that: sft_short -> sft -> sft_long), GRPO from the short SFT model
# and from the SFT model (the paper's recipe: SFT cold start, then GRPO), optionally the VLM direct-score baseline,
# and the table of benchmarks/judge_table.py (gate perfect match, DQC AUC, TPS accuracy).
# Usage: benchmarks/judge_synthetic.sh OUT [TRAIN_SCENES TEST_SCENES SFT_STEPS MORE_SFT_STEPS GRPO_STEPS DIRECT_STEPS
#                                           LONG_SFT_STEPS]
# Every run uses the text scene description (the ablation that makes a tiny random model learnable on CPU; the
# 64-pixel BEV alone carries pedestrians as single pixels), the tiny judge's learnt tokenizer and the balanced SFT
# sampler (data.balance). DIRECT_STEPS=0 (the default) skips the direct-score baseline; steps already done are kept.
set -euo pipefail
OUT=${1:?output directory}; TRAIN=${2:-160}; TEST=${3:-100}; SFT_STEPS=${4:-150}; MORE_SFT_STEPS=${5:-150}
GRPO_STEPS=${6:-60}; DIRECT_STEPS=${7:-0}; LONG_SFT_STEPS=${8:-300}
COMMON="data.describe=True progress=False"
SFT="jaxdrive train sft --config configs/judge_sft_tiny.py data.path=$OUT/data data.balance=True batch_size=16 $COMMON"
[ -f "$OUT/data/records.jsonl" ] || jaxdrive judge data --out "$OUT/data" --train "$TRAIN" --test "$TEST" --seed 1 --no-progress
[ -f "$OUT/tiny_judge/config.json" ] || python -m jaxdrive.judge.tiny "$OUT/tiny_judge" 64 2
[ -f "$OUT/sft_short_model/config.json" ] || $SFT model.path="$OUT/tiny_judge" steps=$SFT_STEPS \
  workdir="$OUT/sft_short_run" export_dir="$OUT/sft_short_model"
[ -f "$OUT/sft_model/config.json" ] || $SFT model.path="$OUT/sft_short_model" steps=$MORE_SFT_STEPS \
  workdir="$OUT/sft_run" export_dir="$OUT/sft_model"
[ -f "$OUT/sft_long_model/config.json" ] || $SFT model.path="$OUT/sft_model" steps=$LONG_SFT_STEPS \
  workdir="$OUT/sft_long_run" export_dir="$OUT/sft_long_model"
DIRECT=(); BASE_DONE="$OUT/data/baselines/test_dqc_epdms.parquet"
if [ "$DIRECT_STEPS" -gt 0 ]; then
  [ -f "$OUT/direct_model/config.json" ] || jaxdrive train sft --config configs/judge_direct_sft_tiny.py \
    model.path="$OUT/tiny_judge" data.path="$OUT/data" $COMMON steps=$DIRECT_STEPS batch_size=16 \
    optim.warmup_steps=10 workdir="$OUT/direct_run" export_dir="$OUT/direct_model"
  DIRECT=(--direct-model "$OUT/direct_model" --describe); BASE_DONE="$OUT/data/baselines/test_dqc_direct.parquet"
fi
[ -f "$BASE_DONE" ] || jaxdrive judge baselines --data "$OUT/data" --split test "${DIRECT[@]}"
for g in grpo:sft_short_model grpo_sft:sft_model; do
  [ -f "$OUT/${g%%:*}_model/config.json" ] || jaxdrive train grpo --config configs/judge_grpo_tiny.py \
    model.path="$OUT/${g#*:}" data.path="$OUT/data" $COMMON eval_data.describe=True steps=$GRPO_STEPS \
    eval_every=10 workdir="$OUT/${g%%:*}_run" export_dir="$OUT/${g%%:*}_model"
done
for m in sft_short:sft_short_model sft:sft_model sft_long:sft_long_model grpo:grpo_model grpo_sft:grpo_sft_model; do
  [ -f "$OUT/${m%%:*}/dqc.parquet" ] || jaxdrive judge run --model "$OUT/${m#*:}" --data "$OUT/data" \
    --out "$OUT/${m%%:*}" --describe --batch-size 16 --no-progress
done
B="$OUT/data/baselines"
jaxdrive eval dqc --predictions "$B/test_dqc_epdms.parquet" "$B/test_dqc_logreg.parquet" \
  "$B/test_dqc_logreg_gates.parquet" "$OUT/sft_short/dqc.parquet" "$OUT/sft/dqc.parquet" "$OUT/sft_long/dqc.parquet" \
  "$OUT/grpo/dqc.parquet" "$OUT/grpo_sft/dqc.parquet" "$B/test_dqc_oracle.parquet" \
  --names EPDMS Non-VLM Non-VLM-Agent DriveJudge-SFT-short DriveJudge-SFT DriveJudge-SFT-long \
  DriveJudge-SFT-short+GRPO DriveJudge-SFT+GRPO Oracle-gates --plot "$OUT/dqc.png"
jaxdrive eval tps --predictions "$B/test_tps_epdms.parquet" "$B/test_tps_ade.parquet" "$B/test_tps_fde.parquet" \
  "$B/test_tps_logreg.parquet" "$B/test_tps_logreg_gates.parquet" "$OUT/sft_short/tps.parquet" \
  "$OUT/sft/tps.parquet" "$OUT/sft_long/tps.parquet" "$OUT/grpo/tps.parquet" "$OUT/grpo_sft/tps.parquet" \
  "$B/test_tps_oracle.parquet" \
  --names EPDMS ADE FDE Non-VLM Non-VLM-Agent DriveJudge-SFT-short DriveJudge-SFT DriveJudge-SFT-long \
  DriveJudge-SFT-short+GRPO DriveJudge-SFT+GRPO Oracle-gates
python benchmarks/judge_table.py "$OUT"
