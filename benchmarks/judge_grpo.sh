#!/usr/bin/env bash
# DriveJudge GRPO from the SFT checkpoint, tested on a large held-out split with paired tests (tiny judge, CPU).
# Usage: benchmarks/judge_grpo.sh OUT [HELD_OUT_SCENES GRPO_SCENES VAL_SCENES GRPO_STEPS]
#   HELD_SEED=7 RUNS_ONLY="grpo_short_plain grpo_plain" SFT_STAGES="sft_short sft" benchmarks/judge_grpo.sh OUT 1000 400
#                  the first confirmatory test: held-out split from fresh seeds (OUT/heldout, below), two GRPO runs
#   HELD_SEED=11 RUNS_ONLY="grpo_margin grpo_plain" SFT_STAGES="sft_short sft" benchmarks/judge_grpo.sh OUT 1000
#                  the margin-reward test (GRPO pairs from 1,200 scenes, docs/drivejudge.md)
#   OUT/data       jaxdrive judge data --train 160 --test HELD_OUT_SCENES --seed 1: its train split is the SFT
#                  training set of benchmarks/judge_synthetic.sh (seed-1 scenes 0-159, the same records), its test
#                  split the held-out scenes (seed offset 1,000,000: no scene shared with any training split below)
#   OUT/heldout    only when HELD_SEED is set: jaxdrive judge data --train 0 --test HELD_OUT_SCENES --seed HELD_SEED
#                  (test scene seeds 1,000,000 + 10,000 x HELD_SEED + i), the held-out split instead of OUT/data's
#                  test split; OUT/data then holds the 160 training scenes only (--test 0)
#   OUT/grpo_data  jaxdrive judge data --train GRPO_SCENES --test VAL_SCENES --seed 3: GRPO's training pairs (seed-3
#                  scenes, which the SFT never saw) and a small validation split for the in-run evaluation
#   OUT/tiny_judge, OUT/{sft_short,sft,sft_long}_model: copied from $SFT_FROM when set (an OUT of
#                  benchmarks/judge_synthetic.sh with the same seed-1 training scenes), else trained here with its
#                  commands (150 steps, +150 = "sft", +300 = "sft_long"); OUT/direct_model likewise (optional)
#                  (SFT_STAGES: the SFT models to train, default all three)
#   GRPO runs      (name, start, overrides) in RUNS below (RUNS_ONLY: the names to run, default all); each writes
#                  OUT/<name>_model and OUT/<name>/start
#   evaluation     benchmarks/judge_tps_pairs.py on the held-out pairs for every judge; `jaxdrive judge run` on
#                  every held-out record (gate perfect match, DQC AUC) for the runs listed in FULL_EVAL
#   table          python benchmarks/judge_grpo_table.py OUT (baselines, judges, paired tests)
# Steps already done are kept (rerunning finishes a partial OUT). Run it under `nice -n 5` on a shared machine.
set -euo pipefail
OUT=${1:?output directory}; HELD=${2:-500}; GRPO_SCENES=${3:-1200}; VAL=${4:-60}; STEPS=${5:-100}
COMMON="data.describe=True progress=False"
# name:start:overrides (space-separated overrides as one field; the start is an SFT run name)
RUNS=(
  "grpo_plain:sft:"                                              # the paper's GRPO as configured (T = 1, K = 1)
  "grpo_t2k4:sft:grpo.temperature=2.0 grpo.oversample=4"         # rollout temperature 2 + dynamic sampling
  "grpo_t2k4g16_s200:sft:grpo.temperature=2.0 grpo.oversample=4 grpo.group_size=16 steps=200"  # + 16 rollouts, 2x steps
  "grpo_t2k4g16_lr3:sft:grpo.temperature=2.0 grpo.oversample=4 grpo.group_size=16 optim.lr=3e-4"  # 3x the lr
  "grpo_short_t2k4:sft_short:grpo.temperature=2.0 grpo.oversample=4"   # from the less trained SFT (150 steps)
  "grpo_short_plain:sft_short:"                                         # its plain-GRPO control
  "grpo_margin:sft:rewards={'judge_margin':{'weight':1.0}} grpo.scale=batch"  # = configs/judge_grpo_margin_tiny.py
)
FULL_EVAL=${FULL_EVAL:-}  # e.g. "sft grpo_t2k4": ~15+ min each on the shared CPU (not in the measured run)
RUNS_ONLY=${RUNS_ONLY:-$(for s in "${RUNS[@]}"; do echo "${s%%:*}"; done)}
SFT_STAGES=${SFT_STAGES:-sft_short sft sft_long}

if [ -n "${HELD_SEED:-}" ]; then
  EVAL=$OUT/heldout
  [ -f "$EVAL/records.jsonl" ] || jaxdrive judge data --out "$EVAL" --train 0 --test "$HELD" --seed "$HELD_SEED" \
    --no-progress
  [ -f "$OUT/data/records.jsonl" ] || jaxdrive judge data --out "$OUT/data" --train 160 --test 0 --seed 1 --no-progress
else
  EVAL=$OUT/data
  [ -f "$OUT/data/records.jsonl" ] || jaxdrive judge data --out "$OUT/data" --train 160 --test "$HELD" --seed 1 \
    --no-progress
fi
[ -f "$OUT/grpo_data/records.jsonl" ] || jaxdrive judge data --out "$OUT/grpo_data" --train "$GRPO_SCENES" \
  --test "$VAL" --seed 3 --no-progress
if [ -n "${SFT_FROM:-}" ]; then
  for d in tiny_judge sft_short_model sft_model sft_long_model direct_model; do
    [ -e "$OUT/$d" ] || [ ! -d "$SFT_FROM/$d" ] || cp -r "$SFT_FROM/$d" "$OUT/$d"
  done
fi
SFT="jaxdrive train sft --config configs/judge_sft_tiny.py data.path=$OUT/data data.balance=True batch_size=16 $COMMON"
[ -f "$OUT/tiny_judge/config.json" ] || python -m jaxdrive.judge.tiny "$OUT/tiny_judge" 64 2
stage() { [[ " $SFT_STAGES " == *" $1 "* ]] && [ ! -f "$OUT/$1_model/config.json" ]; }
! stage sft_short || $SFT model.path="$OUT/tiny_judge" steps=150 \
  workdir="$OUT/sft_short_run" export_dir="$OUT/sft_short_model"
! stage sft || $SFT model.path="$OUT/sft_short_model" steps=150 \
  workdir="$OUT/sft_run" export_dir="$OUT/sft_model"
! stage sft_long || $SFT model.path="$OUT/sft_model" steps=300 \
  workdir="$OUT/sft_long_run" export_dir="$OUT/sft_long_model"
DIRECT=(); [ -f "$OUT/direct_model/config.json" ] && DIRECT=(--direct-model "$OUT/direct_model" --describe)
[ -f "$EVAL/baselines/test_tps_epdms.parquet" ] || jaxdrive judge baselines --data "$EVAL" --split test "${DIRECT[@]}"
for spec in "${RUNS[@]}"; do
  IFS=: read -r name start overrides <<< "$spec"
  [[ " $(echo $RUNS_ONLY) " == *" $name "* ]] || continue
  # shellcheck disable=SC2086
  [ -f "$OUT/${name}_model/config.json" ] || jaxdrive train grpo --config configs/judge_grpo_tiny.py \
    model.path="$OUT/${start}_model" data.path="$OUT/grpo_data" $COMMON eval_data.describe=True steps="$STEPS" \
    eval_every=20 $overrides workdir="$OUT/${name}_run" export_dir="$OUT/${name}_model"
  mkdir -p "$OUT/$name"; echo "$start" > "$OUT/$name/start"
done
for d in sft_short sft sft_long $(for s in "${RUNS[@]}"; do echo "${s%%:*}"; done); do
  [ -f "$OUT/${d}_model/config.json" ] || continue
  [ -f "$OUT/$d/tps.parquet" ] || python benchmarks/judge_tps_pairs.py "$OUT/${d}_model" "$EVAL" "$OUT/$d/tps.parquet"
done
for d in $FULL_EVAL; do
  [ -f "$OUT/$d/dqc.parquet" ] || jaxdrive judge run --model "$OUT/${d}_model" --data "$EVAL" --out "$OUT/$d.full" \
    --describe --batch-size 16 --no-progress
  [ -f "$OUT/$d/dqc.parquet" ] || cp "$OUT/$d.full/dqc.parquet" "$OUT/$d/dqc.parquet"
done
python benchmarks/judge_grpo_table.py "$OUT"
