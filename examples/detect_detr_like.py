"""Tutorial: detect with the DETR-like zoo model (random weights, seeded) through the image predictor.

The model exists to time the routes and the DETR-style decoding (sigmoid top-k over query x class,
cxcywh -> xyxy in the original image's pixels); its boxes mean nothing, but they are the same on
every machine. Runs on a CPU: TensorRT-RTX builds the engine, the predictor runs ONNX Runtime.

    python examples/detect_detr_like.py [OUTPUT_DIR]
"""

import sys
from pathlib import Path

import numpy as np
import torch
from skimage import data

import trtforge
from trtforge.zoo.detr_like import detr_like

out = Path(sys.argv[1] if len(sys.argv) > 1 else "trtforge_out/examples")
model = detr_like(decoder_layers=1)  # the zoo's model with 1 of its 6 decoder layers: a quicker export and build
art = trtforge.compile(model, (torch.zeros(1, 3, 640, 640),), precision="fp16", output_dir=out)
print(f"built: {art.engine_path.name}")
for spec in art.sidecar.outputs:
    print(f"output {spec.name}: {list(spec.shape)}")

# The predictor on the FP32 reference graph through ONNX Runtime (on a GPU: route="cuda_graph" or "tensorrt").
predict = art.predictor(route="onnxruntime", task="detection", threshold=0.0, num_detections=5)
frame = np.asarray(data.astronaut())  # 512 x 512 RGB
detections = predict(frame)
inside = bool((detections.xyxy >= 0).all() and (detections.xyxy <= 512).all())
print(f"{len(detections)} boxes, xyxy in the frame's pixels: {inside}")

# The same call on the PyTorch model (the "eager" route; model= hands it this module, else it would rebuild the
# zoo's default model from the factory the sidecar records).
eager = art.predictor(route="eager", model=model, task="detection", threshold=0.0, num_detections=5)(frame)
same = detections.class_id.tolist() == eager.class_id.tolist()
print(f"same classes in ONNX Runtime and PyTorch: {same}")
