#!/usr/bin/env bash
# Make the venv bench/quant_accuracy.py runs NVIDIA Model Optimizer from (--modelopt-python VENV/bin/python),
# without CUDA: no onnxruntime-gpu, no cupy, no CUDA torch. nvidia-modelopt[onnx]==0.47.0 would pull all
# three (several GB), so the package goes in with --no-deps and its runtime dependencies for
# modelopt.onnx.quantization are listed here one by one: onnxruntime (CPU) in place of onnxruntime-gpu, no
# cupy (only its GPU calibration uses it), and torch (imported by modelopt.onnx at start-up) as the CPU
# build: TORCH_WHEEL if given (a local +cpu wheel), else PyTorch's CPU index.
#
# Usage: bench/modelopt_venv.sh [VENV (default /tmp/mo_venv)]; then
#   python bench/quant_accuracy.py --suite issue21 --modelopt-python /tmp/mo_venv/bin/python
set -euo pipefail
VENV=${1:-/tmp/mo_venv}
PY=${PYTHON:-python3}
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q)
"${PIP[@]}" --no-deps "nvidia-modelopt==0.47.0"
# nvidia-modelopt's own requirements, then its [onnx] extra (versions as its metadata pins them), CPU builds.
"${PIP[@]}" numpy packaging tqdm pyyaml "omegaconf>=2.3.0" "pulp<4.0" "pydantic>=2.0" regex rich safetensors scipy \
    "setuptools>=80" ninja "nvidia-ml-py>=12" \
    "onnx~=1.21.0" "onnxruntime~=1.24.2" "onnx-graphsurgeon>=0.6.1" "onnxconverter-common~=1.16.0" ml_dtypes \
    onnxscript "onnxslim>=0.1.76" "polygraphy>=0.53.4" lief cppimport
if [[ -n "${TORCH_WHEEL:-}" ]]; then
    "${PIP[@]}" "$TORCH_WHEEL"
else
    "${PIP[@]}" torch --index-url https://download.pytorch.org/whl/cpu
fi
if "$VENV/bin/pip" list 2>/dev/null | grep -Eqi '^(onnxruntime-gpu|cupy|nvidia-cu)'; then
    echo "a CUDA package came in; remove $VENV and check the pins above" >&2
    exit 1
fi
"$VENV/bin/python" -c "import torch; from modelopt.onnx.quantization import quantize; assert not torch.version.cuda; print('Model Optimizer ready (CPU):', torch.__version__)"
