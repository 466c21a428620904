#!/usr/bin/env bash
# OpenREAD tiny-model reward curve on CPU through `jaxdrive train`: tiny Qwen3 policy (digit-per-token BPE) ->
# cold-start SFT on the synthetic knowledge + planning CoT set -> joint GRPO with R = R_know + R_traj + R_format, and
# the same GRPO run with lr = 0 as the control (same seed: same prompts per step and same sampling keys, so the
# difference between the two curves is what GRPO learnt, not which prompts a step happened to draw).
# Usage: benchmarks/openread_grpo_curve.sh OUT [SFT_STEPS GRPO_STEPS WINDOW LR MODE]   (MODE: lora | full)
set -euo pipefail
OUT=${1:?output directory}; SFT_STEPS=${2:-150}; GRPO_STEPS=${3:-80}; WINDOW=${4:-20}; LR=${5:-1e-3}; MODE=${6:-lora}
[ -f "$OUT/policy/config.json" ] || python -m jaxdrive.train.openread_tiny "$OUT/policy"
[ -f "$OUT/cold_start/model.safetensors" ] || jaxdrive train sft --config configs/openread_sft_tiny.py \
  model.path="$OUT/policy" "data.tasks=['knowledge','planning']" data.max_len=240 steps=$SFT_STEPS \
  optim.warmup_steps=5 log_every=25 progress=False workdir="$OUT/sft" export_dir="$OUT/cold_start"
GRPO="model.path=$OUT/cold_start steps=$GRPO_STEPS log_every=1 eval_every=10 progress=False grpo.beta=0.0 finetune.mode=$MODE"
for run in grpo:$LR control:0.0; do
  rm -rf "$OUT/${run%%:*}"
  jaxdrive train grpo --config configs/openread_grpo_tiny.py $GRPO optim.lr=${run#*:} workdir="$OUT/${run%%:*}"
done
python benchmarks/openread_grpo_curve.py "$OUT/grpo" --control "$OUT/control" --window "$WINDOW" \
  --plot "$OUT/reward_curve.png"
