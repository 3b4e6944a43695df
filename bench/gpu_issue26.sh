#!/usr/bin/env bash
# Issue 26 on one GPU, in one self-contained run of about 6-7 minutes (budgeted for 9):
#   1. bench/predictor_pipeline.py, FIRST in its own fresh process: the predictor at batch 1 against
#      the model alone (frame on the GPU, frame_buffer(), pageable), per second for the first 10 s
#      after the process's first compile, then steady; batch 8 plain and pipelined.
#   2. bench/serve_load.py, the documented configuration: EfficientNet-Lite0, cuda_graph route,
#      4 instances, Triton system shared memory, 128 in flight, 8 client processes, uint8 and float32
#      frames; each cell 2 runs x 15 s after a 3 s warm-up; null-model ceilings and offline rates in
#      the same run, so served / min(offline, null) is computed.
# Writes predictor_pipeline.json, serve_load.json, the logs and versions.txt into the folder $1.
#
#   bash bench/gpu_issue26.sh "$OUT"                                  # on the GPU machine, repo root
#   GPU_ISSUE26_SCALE=cpu bash bench/gpu_issue26.sh /tmp/gi26         # the script's logic on a CPU (tiny windows)
#
# Needs: a CUDA torch, nvidia-pytriton and tritonclient importable (e.g. PYTHONPATH=/tmp/site:.), and
# the serving stub environment: $TRTFORGE_SERVE_STUB_ENV when it is ready, else one is made in
# $1/stubenv (pip needs numpy<2: from PyPI, or from the wheels in $TRTFORGE_WHEELS, offline).
set -euo pipefail
OUT=${1:?usage: bash bench/gpu_issue26.sh OUT_DIR}
mkdir -p "$OUT"
PY=${PYTHON:-python}
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
START=$(date +%s)
stamp() { echo "[gpu_issue26 +$(( $(date +%s) - START ))s] $*"; }

if [ "${GPU_ISSUE26_SCALE:-gpu}" = cpu ]; then   # the same steps, tiny, on the CPU
  PP_ARGS=(--device cpu --route eager --window-s 2 --batches 1 --repeats 1)
  PP_TIMEOUT=900 SL_TIMEOUT=1200
  SL_ARGS=(--route eager --max-batch 4 --instances 1 --inflight 4 --processes 1 --transport grpc
           --seconds 2 --warmup-s 1 --repeats 2 --offline-repeats 1 --budget-s 600)
else
  PP_ARGS=(--device cuda:0 --route cuda_graph --window-s 10 --batches 200 --repeats 200)
  PP_TIMEOUT=120 SL_TIMEOUT=390
  SL_ARGS=(--route cuda_graph --model zoo:efficientnet_lite0 --devices 0 --max-batch 64 --instances 4
           --inflight 128 --processes 8 --transport shm --seconds 15 --warmup-s 3 --repeats 2
           --offline-repeats 20 --budget-s 270)
fi

{ $PY -c "import torch, sys; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  git rev-parse HEAD 2>/dev/null || true; } > "$OUT/versions.txt" 2>&1
stamp "versions: $(tr '\n' ' ' < "$OUT/versions.txt")"

stamp "1/2 predictor: first seconds, steady, batch 8 pipelined"
timeout "$PP_TIMEOUT" $PY bench/predictor_pipeline.py "${PP_ARGS[@]}" --out "$OUT" 2>&1 | tee "$OUT/predictor_pipeline.log" \
  || stamp "predictor_pipeline.py FAILED (see predictor_pipeline.log); serving runs anyway"

if ! $PY -c "import sys; from pathlib import Path; from trtforge.serve.environment import default_stub_env, stub_env_ready; sys.exit(0 if stub_env_ready(default_stub_env()) else 1)"; then
  export TRTFORGE_SERVE_STUB_ENV="$OUT/stubenv"
  stamp "making the stub environment in $TRTFORGE_SERVE_STUB_ENV"
  $PY -m trtforge.serve.environment "$TRTFORGE_SERVE_STUB_ENV" ${TRTFORGE_WHEELS:+--no-index --find-links "$TRTFORGE_WHEELS"}
fi

stamp "2/2 serving: uint8 and float32 frames, served and null model, offline before and after"
timeout "$SL_TIMEOUT" $PY bench/serve_load.py "${SL_ARGS[@]}" --input-format uint8,native --out "$OUT" 2>&1 \
  | tee "$OUT/serve_load.log" || stamp "serve_load.py FAILED (see serve_load.log)"
stamp "done; JSON in $OUT: $(ls "$OUT" | tr '\n' ' ')"
