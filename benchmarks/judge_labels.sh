#!/usr/bin/env bash
# DriveJudge on labelled scenes held out by scene (issue 49), the tiny judge on CPU: the data set from a labelled
# scene folder (default ../shared/fixtures/drivejudge_labels, 64 of its 320 scenes held out), the baselines (EPDMS,
# constant-probability judge, fixed gate vector, oracle gates, non-VLM classifiers: image logistic regression and
# gradient-boosted trees on sub-scores + context facts, optionally the VLM direct score), the judge SFT (BEV + the
# context description), GRPO from it (the trained judge is left as a pretrained directory in OUT/judge), optionally the
# BEV-only judge, and the table of benchmarks/judge_labels_table.py. Each stage is skipped when its output exists, so
# a rerun continues an interrupted one. Wall time of each stage goes to OUT/times.txt.
# Usage: benchmarks/judge_labels.sh OUT [LABELLED_DIR]
#   SFT_STEPS (600) GRPO_STEPS (60) TEST_SCENES (64) SEED (0) IMAGE_SIZE (64)
#   EXTRA="bev direct": also the BEV-only judge and the VLM direct-score baseline (each another SFT run;
#   DIRECT_STEPS (300) steps for the latter)
# On a pod: the same stages with model.path set to a Qwen2.5-VL / Qwen3-VL directory and configs/judge_sft.py /
# configs/judge_grpo.py (data.describe=True), e.g. launch/slurm.sh jaxdrive train sft --config configs/judge_sft.py ...
set -euo pipefail
OUT=${1:?output directory}
LABELLED=${2:-$(cd "$(dirname "$0")/../.." && pwd)/shared/fixtures/drivejudge_labels}
SFT_STEPS=${SFT_STEPS:-600}; GRPO_STEPS=${GRPO_STEPS:-60}; TEST_SCENES=${TEST_SCENES:-64}; SEED=${SEED:-0}
IMAGE_SIZE=${IMAGE_SIZE:-64}; EXTRA=${EXTRA:-}; DIRECT_STEPS=${DIRECT_STEPS:-300}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
stage() {  # stage NAME DONE_FILE COMMAND...: runs COMMAND unless DONE_FILE exists, timing it
  local name=$1 done_file=$2; shift 2
  [ -e "$done_file" ] && { echo "== $name: done before ($done_file)"; return; }
  echo "== $name: $*"; local t0=$SECONDS
  "$@"
  echo "$name $((SECONDS - t0)) s" | tee -a "$OUT/times.txt"
}
D="$OUT/data"
stage data "$D/records.jsonl" jaxdrive judge data --scenes "$LABELLED/scenes" --labels "$LABELLED/labels.jsonl" \
  --out "$D" --test-scenes "$TEST_SCENES" --seed "$SEED" --image-size "$IMAGE_SIZE" --no-progress
stage tiny_judge "$OUT/tiny/config.json" python -m jaxdrive.judge.tiny "$OUT/tiny" 64 2
SFT=(jaxdrive train sft --config configs/judge_sft_labels_tiny.py data.path="$D" steps="$SFT_STEPS" progress=False)
stage sft "$OUT/sft/config.json" "${SFT[@]}" model.path="$OUT/tiny" export_dir="$OUT/sft"
stage grpo "$OUT/judge/config.json" jaxdrive train grpo --config configs/judge_grpo_labels_tiny.py \
  model.path="$OUT/sft" data.path="$D" steps="$GRPO_STEPS" progress=False export_dir="$OUT/judge"
DIRECT=()
if [[ " $EXTRA " == *" bev "* ]]; then
  stage sft_bev "$OUT/sft_bev/config.json" "${SFT[@]}" data.describe=False data.max_len=512 model.path="$OUT/tiny" \
    export_dir="$OUT/sft_bev"
  stage eval_bev "$OUT/eval_bev/dqc.parquet" jaxdrive judge run --model "$OUT/sft_bev" --data "$D" \
    --out "$OUT/eval_bev" --batch-size 16 --no-progress
fi
if [[ " $EXTRA " == *" direct "* ]]; then
  stage direct "$OUT/direct/config.json" jaxdrive train sft --config configs/judge_direct_sft_tiny.py \
    model.path="$OUT/tiny" data.path="$D" data.describe=True data.max_len=640 steps="$DIRECT_STEPS" progress=False \
    export_dir="$OUT/direct"
  DIRECT=(--direct-model "$OUT/direct")
fi
stage baselines "$D/baselines/test_dqc_trees.parquet" jaxdrive judge baselines --data "$D" "${DIRECT[@]}"
stage eval_sft "$OUT/eval_sft/dqc.parquet" jaxdrive judge run --model "$OUT/sft" --data "$D" --out "$OUT/eval_sft" \
  --batch-size 16 --no-progress
stage eval_grpo "$OUT/eval_grpo/dqc.parquet" jaxdrive judge run --model "$OUT/judge" --data "$D" \
  --out "$OUT/eval_grpo" --batch-size 16 --no-progress
python benchmarks/judge_labels_table.py "$OUT" | tee "$OUT/table.md"
