#!/usr/bin/env bash
# The scorer's accelerator checks in one call, for a borrowed GPU whose minutes are few (docs/scoring-at-scale.md,
# "Measured on one NVIDIA H200"): the step-only figures at K = 4,096 (benchmarks/score_end_to_end.py, with a
# jax.profiler trace of the first batch size) and the NAVSIM parity tests run on the device.
#
# The device machine has no network. Prepare on the host, in the checkout (both folders are git-ignored):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl orjson shapely                      # what the device's image lacks (it had jax, flax, numpy, pytest)
#   mkdir -p .gpu/fixtures && cp -r ../shared/fixtures/epdms .gpu/fixtures/   # the parity fixtures
# then run `bash benchmarks/device_check.sh` there, carrying .whl and .gpu. Results go to $OUT (or /tmp/device_check):
# bench.txt, tests.txt, step.xplane.pb (the trace, copied out of the profiler's plugins/profile/<time>/ folders:
# only files at most two folders down come back), step_hlo.txt.gz (the traced program's optimized HLO) and
# kernels.txt: the costliest kernels of the trace, each with the source lines it comes from
# (benchmarks/kernel_sources.py on the two files; rerun it here with --top 60 for more rows).
# Environment: PROPOSALS (step batch sizes, default 262144; the 1,048,576 row was 5.43 M/s on 2026-12-04),
# PARTS=1 (also time the step's parts: ~70 s of GPU compile each), BENCH_S and TESTS_S (time limits in seconds,
# default 340, 200). Then one step row at 262,144 proposals (~130 s each, appended to trips.txt) per entry of:
# SEGMENTS (default "scan": the broad phase's segment sums and minima without scatters, JAXDRIVE_SEGMENTS=scan,
# jaxdrive/broadphase/segments.py; never yet run on a GPU; SEGMENTS= for none), TRIPS="16 32" (say: the broad-phase
# loops' ACCELERATOR_TRIPS, default 8) and PALLAS=1 (the Pallas edge-tile kernel, JAXDRIVE_KERNELS=pallas; never yet
# run on a GPU). The defaults should take ~450 s: the first run of 2026-12-04 (two batch sizes, no extra row) took
# 417 s, two ~100 s compiles and the parity tests 128 s.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/device_check}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/device_check_site .whl/*.whl
  export PYTHONPATH=/tmp/device_check_site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -d .gpu/fixtures/epdms ]; then export JAXDRIVE_SHARED=$PWD/.gpu; fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
export PYTHONUNBUFFERED=1
rm -rf /tmp/device_check_trace
parts=()
if [ "${PARTS:-0}" = 1 ]; then parts=(--parts); fi
timeout "${BENCH_S:-340}" python3 benchmarks/score_end_to_end.py --ks 4096 --step-only \
  --step-proposals "${PROPOSALS:-262144}" --replicas 0 --reps 5 --trace /tmp/device_check_trace "${parts[@]}" \
  2>&1 | tee "$out/bench.txt"
echo "benchmark exit: ${PIPESTATUS[0]} (124: over BENCH_S)" | tee -a "$out/bench.txt"
find /tmp/device_check_trace -name "*.xplane.pb" -exec cp {} "$out/step.xplane.pb" \; 2>/dev/null
if [ -f /tmp/device_check_trace/step_hlo.txt ]; then
  gzip -c /tmp/device_check_trace/step_hlo.txt > "$out/step_hlo.txt.gz"
  timeout 120 python3 benchmarks/kernel_sources.py "$out/step.xplane.pb" "$out/step_hlo.txt.gz" --steps 3 --top 30 \
    2>&1 | tee "$out/kernels.txt"
fi
one_row() {  # one step row at 262,144 proposals, extra arguments passed on; appended to trips.txt with a label
  local label=$1; shift
  timeout 200 python3 benchmarks/score_end_to_end.py --ks 4096 --step-only --step-proposals 262144 --replicas 0 \
    --reps 3 --ref-scenes 1 "$@" 2>&1 | grep -E "^device|^ *4096|rror" | sed "s/^/$label: /" | tee -a "$out/trips.txt"
}
for impl in ${SEGMENTS-scan}; do JAXDRIVE_SEGMENTS=$impl one_row "segments $impl"; done
for trips in ${TRIPS:-}; do one_row "trips $trips" --accelerator-trips "$trips"; done
if [ "${PALLAS:-0}" = 1 ]; then JAXDRIVE_KERNELS=pallas one_row pallas; fi
timeout "${TESTS_S:-200}" python3 -m pytest -q -p no:rerunfailures -p no:cacheprovider -o addopts="-ra" \
  tests/test_epdms_parity.py tests/test_scorer.py 2>&1 | tail -25 | tee "$out/tests.txt"
echo "tests exit: ${PIPESTATUS[0]} (124: over TESTS_S)" | tee -a "$out/tests.txt"
