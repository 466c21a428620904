#!/bin/bash
# Run one jaxdrive command on every worker of a Cloud TPU VM pod slice (one process per TPU VM host); JAX's own
# cluster detection finds the coordinator and the process ids (JAXDRIVE_DISTRIBUTED=auto).
#
#   launch/tpu_pod.sh TPU_NAME ZONE                     # the default job below (judge GRPO)
#   launch/tpu_pod.sh my-v5p-64 us-east5-a score --count 1000000 --batch-size 4096 --out gs://bucket/score-1m
#
# Every worker needs the repository at $JAXDRIVE_REPO_DIR (default ~/jaxdrive) with jaxdrive installed
# ("pip install -e '.[train]' 'jax[tpu]'"), e.g. once with
#   gcloud compute tpus tpu-vm ssh TPU_NAME --zone ZONE --worker=all --command="git clone URL jaxdrive && ..."
# workdir / --out must be shared by all workers (a GCS bucket or a shared filesystem).
set -euo pipefail

if [ "$#" -lt 2 ]; then
  echo "usage: $0 TPU_NAME ZONE [jaxdrive arguments...]" >&2
  exit 2
fi
TPU_NAME=$1
ZONE=$2
shift 2
if [ "$#" -eq 0 ]; then
  set -- train grpo --config configs/judge_grpo.py model.path=/mnt/ckpt/judge-sft data.path=/mnt/data/drivejudge \
    workdir=/mnt/runs/judge-grpo mesh.enabled=True mesh.fsdp=-1
fi

REPO_DIR=${JAXDRIVE_REPO_DIR:-'~/jaxdrive'}
ARGS=$(printf ' %q' "$@")
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all \
  --command="cd $REPO_DIR && JAXDRIVE_DISTRIBUTED=auto JAXDRIVE_PEER_TIMEOUT_S=${JAXDRIVE_PEER_TIMEOUT_S:-120} jaxdrive$ARGS"
