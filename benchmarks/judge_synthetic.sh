#!/usr/bin/env bash
# DriveJudge on the synthetic labelled set with the tiny random judge on CPU: data, baselines, SFT, GRPO, tables.
# Usage: benchmarks/judge_synthetic.sh OUT [TRAIN_SCENES TEST_SCENES SFT_STEPS GRPO_STEPS DESCRIBE]
set -euo pipefail
OUT=${1:?output directory}; TRAIN=${2:-45}; TEST=${3:-15}; SFT_STEPS=${4:-60}; GRPO_STEPS=${5:-10}
DESCRIBE=${6:-True}  # True: prompts carry the compact text scene description (the text ablation)
FLAG=$([ "$DESCRIBE" = True ] && echo --describe || true)
[ -f "$OUT/data/records.jsonl" ] || jaxdrive judge data --out "$OUT/data" --train "$TRAIN" --test "$TEST" --seed 1 --no-progress
jaxdrive judge baselines --data "$OUT/data" --split test
python -c "from jaxdrive.judge.tiny import save_tiny_judge; save_tiny_judge('$OUT/tiny_judge')"
jaxdrive judge run --model "$OUT/tiny_judge" --data "$OUT/data" --out "$OUT/zero_shot" $FLAG --no-progress
jaxdrive train sft --config configs/judge_sft_tiny.py model.path="$OUT/tiny_judge" data.path="$OUT/data" \
  data.describe=$DESCRIBE steps=$SFT_STEPS batch_size=8 optim.warmup_steps=5 progress=False export_dir="$OUT/sft_model" workdir="$OUT/sft_run"
jaxdrive judge run --model "$OUT/sft_model" --data "$OUT/data" --out "$OUT/sft" $FLAG --no-progress
jaxdrive train grpo --config configs/judge_grpo_tiny.py model.path="$OUT/sft_model" data.path="$OUT/data" \
  data.describe=$DESCRIBE eval_data.describe=$DESCRIBE steps=$GRPO_STEPS eval_every=$GRPO_STEPS \
  grpo.prompts_per_step=8 optim.lr=5e-4 optim.warmup_steps=1 progress=False \
  export_dir="$OUT/grpo_model" workdir="$OUT/grpo_run"
jaxdrive judge run --model "$OUT/grpo_model" --data "$OUT/data" --out "$OUT/grpo" $FLAG --no-progress \
  --report "$OUT/report.html"
B="$OUT/data/baselines"
jaxdrive eval dqc --predictions "$B/test_dqc_epdms.parquet" "$B/test_dqc_logreg.parquet" "$B/test_dqc_logreg_gates.parquet" \
  "$OUT/zero_shot/dqc.parquet" "$OUT/sft/dqc.parquet" "$OUT/grpo/dqc.parquet" "$B/test_dqc_oracle.parquet" \
  --names EPDMS Non-VLM Non-VLM-Agent DriveJudge-zero-shot DriveJudge-SFT DriveJudge-SFT+GRPO Oracle-gates \
  --plot "$OUT/dqc.png"
jaxdrive eval tps --predictions "$B/test_tps_epdms.parquet" "$B/test_tps_ade.parquet" "$B/test_tps_fde.parquet" \
  "$B/test_tps_logreg.parquet" "$B/test_tps_logreg_gates.parquet" "$OUT/zero_shot/tps.parquet" "$OUT/sft/tps.parquet" \
  "$OUT/grpo/tps.parquet" "$B/test_tps_oracle.parquet" \
  --names EPDMS ADE FDE Non-VLM Non-VLM-Agent DriveJudge-zero-shot DriveJudge-SFT DriveJudge-SFT+GRPO Oracle-gates
for s in zero_shot sft grpo; do echo "$s: $(cat "$OUT/$s/gates.json" | python -c 'import json,sys; d=json.load(sys.stdin); print("perfect match %.2f%%, majority %.2f%%" % (d["perfect_match"], d["majority_perfect_match"]))')"; done
