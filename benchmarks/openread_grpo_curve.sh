#!/usr/bin/env bash
# OpenREAD tiny-model reward curve on CPU through `jaxdrive train`, with a trained critic and the rule-determined
# planning variant:
#   1. the tiny policy and a second tiny Qwen3 for the critic (python -m jaxdrive.train.openread_tiny);
#   2. the critic: SFT on synthetic (question, reference, prediction) -> yes/no pairs (configs/openread_critic_tiny.py),
#      then its separation on held-out pairs (benchmarks/openread_critic_check.py);
#   3. a short cold-start SFT of the policy on knowledge + constant-speed planning (leaves headroom for GRPO);
#   4. joint GRPO with R = R_know (0.9 trained critic + 0.1 MiniLM) + R_traj + R_format (configs/openread_grpo_tiny.py),
#      and the same run with lr = 0 as the control (same seed: same prompts per step and same sampling keys, so the
#      difference between the two curves is what GRPO learnt, not which prompts a step happened to draw).
# Usage: benchmarks/openread_grpo_curve.sh OUT [CRITIC_STEPS SFT_STEPS GRPO_STEPS WINDOW LR MODE TEMPERATURE]
#   (MODE: lora | full; TEMPERATURE: the GRPO sampling temperature, 1.0 by default; docs/openread.md also measures 0.7)
set -euo pipefail
OUT=${1:?output directory}; CRITIC_STEPS=${2:-600}; SFT_STEPS=${3:-200}; GRPO_STEPS=${4:-400}; WINDOW=${5:-40}
LR=${6:-1e-4}; MODE=${7:-full}; TEMPERATURE=${8:-1.0}
[ -f "$OUT/policy/config.json" ] || python -m jaxdrive.train.openread_tiny "$OUT/policy"
[ -f "$OUT/critic_base/config.json" ] || python -m jaxdrive.train.openread_tiny "$OUT/critic_base" --seed 1
[ -f "$OUT/critic/model.safetensors" ] || jaxdrive train sft --config configs/openread_critic_tiny.py \
  model.path="$OUT/critic_base" steps=$CRITIC_STEPS optim.lr=1e-3 batch_size=32 log_every=50 progress=False \
  workdir="$OUT/critic_sft" export_dir="$OUT/critic"
python benchmarks/openread_critic_check.py "$OUT/critic"
[ -f "$OUT/cold_start/model.safetensors" ] || jaxdrive train sft --config configs/openread_sft_tiny.py \
  model.path="$OUT/policy" "data.tasks=['knowledge','planning']" data.max_len=240 steps=$SFT_STEPS \
  optim.warmup_steps=5 log_every=25 progress=False workdir="$OUT/sft" export_dir="$OUT/cold_start"
GRPO="model.path=$OUT/cold_start steps=$GRPO_STEPS log_every=1 eval_every=20 progress=False grpo.beta=0.0
  grpo.temperature=$TEMPERATURE finetune.mode=$MODE rewards.openread_knowledge.critic.path=$OUT/critic"
pids=()
for run in grpo:$LR control:0.0; do  # the two runs side by side (each is mostly single-threaded on CPU)
  rm -rf "$OUT/${run%%:*}"
  jaxdrive train grpo --config configs/openread_grpo_tiny.py $GRPO optim.lr=${run#*:} workdir="$OUT/${run%%:*}" \
    export_dir="$OUT/${run%%:*}_export" > "$OUT/${run%%:*}.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
python benchmarks/openread_grpo_curve.py "$OUT/grpo" --control "$OUT/control" --window "$WINDOW" \
  --plot "$OUT/reward_curve.png"
# greedy and sampled reward by task and part, cold start vs the trained policy (the eval prompts and 32 training ones)
python benchmarks/openread_grpo_parts.py "$OUT/cold_start" "$OUT/grpo_export" --critic "$OUT/critic" --show 2
