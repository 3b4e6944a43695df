#!/usr/bin/env bash
# The predictor and serving on one GPU (issue 26's acceptance), in two steps; each measures every cell it names:
#   predictor  bench/predictor_pipeline.py in its own fresh process: the predictor at batch 1 against the
#              model alone (frame on the GPU, frame_buffer(), pageable), per second for the first 10 s after
#              the process's first compile, then steady; batch 8 plain and pipelined. About 2 min.
#   serving    bench/serve_load.py, the documented configuration: EfficientNet-Lite0, cuda_graph route,
#              4 instances, Triton system shared memory, 128 in flight, 8 client processes; two
#              configurations, uint8 frames and float32 frames, each with its served server AND its
#              null-model server (each cell 2 runs x 15 s after a 3 s warm-up), and the route offline before
#              and after, so served / min(offline, null) is computed for both. About 7-7.5 min (the same cells
#              took 423 s on an H200 in session 12). If --budget-s skips a configuration, serve_load.py
#              exits 1 and so does this script: a run that measured fewer cells never passes for this one.
#   all        both, in that order (about 9.5 min: over a 10-minute command limit, run the steps as two).
# Writes predictor_pipeline.json, serve_load.json, the logs and versions.txt into the folder $1.
#
#   bash bench/gpu_predictor_and_serving.sh "$OUT" predictor                # on the GPU machine, repo root
#   bash bench/gpu_predictor_and_serving.sh "$OUT" serving
#   BENCH_SCALE=cpu bash bench/gpu_predictor_and_serving.sh /tmp/gps all   # the script's logic on a CPU (tiny windows)
#
# Needs: a CUDA torch, nvidia-pytriton and tritonclient importable (e.g. PYTHONPATH=/tmp/site:.), and
# the serving stub environment: $TRTFORGE_SERVE_STUB_ENV when it is ready, else one is made in
# $1/stubenv (pip needs numpy<2: from PyPI, or from the wheels in $TRTFORGE_WHEELS, offline).
set -euo pipefail
USAGE="usage: bash bench/gpu_predictor_and_serving.sh OUT_DIR predictor|serving|all"
OUT=${1:?$USAGE}
STEP=${2:?$USAGE}
case "$STEP" in predictor|serving|all) ;; *) echo "error: unknown step '$STEP'; $USAGE" >&2; exit 2 ;; esac
mkdir -p "$OUT"
PY=${PYTHON:-python}
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
START=$(date +%s)
stamp() { echo "[gpu_predictor_and_serving +$(( $(date +%s) - START ))s] $*"; }

if [ "${BENCH_SCALE:-gpu}" = cpu ]; then   # the same steps, tiny, on the CPU
  PP_ARGS=(--device cpu --route eager --window-s 2 --batches 1 --repeats 1)
  PP_TIMEOUT=900 SL_TIMEOUT=1200
  SL_ARGS=(--route eager --max-batch 4 --instances 1 --inflight 4 --processes 1 --transport grpc
           --seconds 2 --warmup-s 1 --repeats 2 --offline-repeats 1 --budget-s 1100)
else
  PP_ARGS=(--device cuda:0 --route cuda_graph --window-s 10 --batches 200 --repeats 200)
  # the budget lets the second configuration start while the first one's duration still fits before 480 s;
  # the offline run after it (about 100 s) ends before the timeout
  PP_TIMEOUT=150 SL_TIMEOUT=570
  SL_ARGS=(--route cuda_graph --model zoo:efficientnet_lite0 --devices 0 --max-batch 64 --instances 4
           --inflight 128 --processes 8 --transport shm --seconds 15 --warmup-s 3 --repeats 2
           --offline-repeats 6 --budget-s 480)
fi

{ $PY -c "import torch, sys; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  git rev-parse HEAD 2>/dev/null || true; } > "$OUT/versions.txt" 2>&1
stamp "versions: $(tr '\n' ' ' < "$OUT/versions.txt")"
STATUS=0

if [ "$STEP" != serving ]; then
  stamp "predictor: first seconds, steady, batch 8 pipelined"
  timeout "$PP_TIMEOUT" $PY bench/predictor_pipeline.py "${PP_ARGS[@]}" --out "$OUT" 2>&1 | tee "$OUT/predictor_pipeline.log" \
    || { stamp "predictor_pipeline.py FAILED (see predictor_pipeline.log)"; STATUS=1; }
fi

if [ "$STEP" != predictor ]; then
  if ! $PY -c "import sys; from trtforge.serve.environment import default_stub_env, stub_env_ready; sys.exit(0 if stub_env_ready(default_stub_env()) else 1)"; then
    export TRTFORGE_SERVE_STUB_ENV="$OUT/stubenv"
    stamp "making the stub environment in $TRTFORGE_SERVE_STUB_ENV"
    $PY -m trtforge.serve.environment "$TRTFORGE_SERVE_STUB_ENV" ${TRTFORGE_WHEELS:+--no-index --find-links "$TRTFORGE_WHEELS"}
  fi
  stamp "serving: uint8 and float32 frames, each served and null model, offline before and after"
  timeout "$SL_TIMEOUT" $PY bench/serve_load.py "${SL_ARGS[@]}" --input-format uint8,native --out "$OUT" 2>&1 \
    | tee "$OUT/serve_load.log" || { stamp "serve_load.py FAILED or measured fewer cells (see serve_load.log)"; STATUS=1; }
fi
stamp "done (exit $STATUS); JSON in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit "$STATUS"
