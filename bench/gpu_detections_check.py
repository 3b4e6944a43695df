"""The detection predictor on a GPU (issue 37, item 4): letterbox inside the CUDA graph, boxes mapped back per image.

A small YOLO-like module (raw head ``(N, 4 + C, A)``, seeded random weights) on the ``cuda_graph`` route with the
fixed-shape NMS appended (``TorchEngine(postprocess=NMS(...))``), run by the image predictor with a letterbox
record: same-size batches (one CUDA graph with the letterbox and the box mapping in it, unfused and fused by
torch.compile), frames in ``frame_buffer()``, a mixed-size batch, and ``PipelinedPredictor``; each against the
same module on the GPU's ``fp16`` route through the predictor's plain path (``cuda_graph`` computes in FP16),
and the GPU's ``eager`` route (FP32) against the CPU's. Prints one line per check and exits 1
if any fails. No timing: this checks results.

    python3 bench/gpu_detections_check.py
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn

from trtforge.core.postprocess import NMS, NMS_OUTPUTS
from trtforge.core.specs import TensorSpec
from trtforge.runtime.torch_routes import TorchEngine
from trtforge.vision.pipeline import PipelinedPredictor
from trtforge.vision.predictor import Predictor

SIZE, CLASSES = 64, 8
RECORD = {"resize": [SIZE, SIZE], "resize_mode": "letterbox"}
SETTINGS = NMS("yolo", score_threshold=0.3, iou_threshold=0.5, max_detections=20, candidates=48)


class TinyYolo(nn.Module):
    """(N, 3, 64, 64) → (N, 4 + C, 64): per stride-8 cell a box (cx, cy, w, h in input pixels) and C class scores."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.SiLU(),
                                  nn.Conv2d(32, 4 + CLASSES, 3, 2, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        n, _, h, w = y.shape
        gy, gx = torch.meshgrid(torch.arange(h, device=x.device), torch.arange(w, device=x.device), indexing="ij")
        cx = (gx + 0.5 + torch.tanh(y[:, 0])) * 8
        cy = (gy + 0.5 + torch.tanh(y[:, 1])) * 8
        bw, bh = torch.exp(y[:, 2].clamp(-1, 1)) * 16, torch.exp(y[:, 3].clamp(-1, 1)) * 16
        boxes = torch.stack([cx, cy, bw, bh], 1)
        return torch.cat([boxes, torch.sigmoid(y[:, 4:] * 2)], 1).reshape(n, 4 + CLASSES, h * w)


def engine(route: str, device: str) -> TorchEngine:
    torch.manual_seed(0)
    specs = [TensorSpec("images", "float32", (-1, 3, SIZE, SIZE))]
    outputs = [TensorSpec(name, dtype, ()) for name, dtype in zip(NMS_OUTPUTS, ("int32", "float32", "float32", "int32"),
                                                                   strict=True)]
    return TorchEngine(TinyYolo(), specs, outputs, route=route, device=device, postprocess=SETTINGS)


def frames(sizes, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]


FAILED: list[str] = []


def same(name: str, got, want, atol: float = 1e-2) -> None:
    ok = len(got) == len(want) and all(
        len(a) == len(b) and np.array_equal(a.class_id, b.class_id) and np.allclose(a.xyxy, b.xyxy, atol=atol, rtol=0)
        for a, b in zip(got, want, strict=True))
    worst = max((float(np.abs(a.xyxy - b.xyxy).max(initial=0)) for a, b in zip(got, want, strict=True)
                 if len(a) == len(b)), default=0.0)
    counts = [len(d) for d in got]
    print(f"{'ok  ' if ok else 'FAIL'} {name}: counts {counts}, max |box diff| {worst:.2e} px")
    if not ok:
        FAILED.append(name)


def main() -> None:
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    batch = frames([(480, 640)] * 2, 1)
    mixed = frames([(480, 640), (300, 451), (512, 304)], 2)
    cpu = Predictor(engine("eager", "cpu"), RECORD)
    want_batch, want_mixed = cpu(batch), cpu(mixed)
    print(f"cpu eager (FP32) reference: task {cpu.task}, counts {[len(d) for d in want_batch]} "
          f"{[len(d) for d in want_mixed]}")
    gpu32 = Predictor(engine("eager", "cuda"), RECORD)  # FP32 on the GPU, plain path
    same("eager on the GPU: same-size batch", gpu32(batch), want_batch)
    same("eager on the GPU: mixed sizes", gpu32(mixed), want_mixed)
    # cuda_graph computes in FP16: its reference is the fp16 route on the GPU through the plain path.
    fp16 = Predictor(engine("fp16", "cuda"), RECORD, cuda_graph=False)
    want_batch, want_mixed = fp16(batch), fp16(mixed)
    for fused in (False, True):
        gpu = Predictor(engine("cuda_graph", "cuda"), RECORD, compile_preprocessing=fused)
        tag = f"cuda_graph, fused={fused}"
        assert gpu.cuda_graph, "the predictor should capture graphs on the cuda_graph route"
        same(f"{tag}: same-size batch (graph)", gpu(batch), want_batch, 0.5)
        same(f"{tag}: same-size batch, replay", gpu(batch), want_batch, 0.5)
        buf = gpu.frame_buffer(2, 480, 640)
        buf[:] = np.stack(batch)
        same(f"{tag}: frame_buffer", gpu([buf[0], buf[1]]), want_batch, 0.5)
        same(f"{tag}: frame_buffer, replay", gpu([buf[0], buf[1]]), want_batch, 0.5)
        same(f"{tag}: mixed sizes (plain path)", gpu(mixed), want_mixed, 0.5)
        same(f"{tag}: one at a time (graph per size)", [gpu(f) for f in mixed], want_mixed, 0.5)
        same(f"{tag}: frames on the GPU", gpu([torch.from_numpy(f).cuda() for f in batch]), want_batch, 0.5)
        with PipelinedPredictor(gpu) as pipe:
            for i, results in enumerate(pipe.run([batch, batch, batch])):
                same(f"{tag}: pipelined batch {i}", results, want_batch, 0.5)
        gpu.close()
    print("all checks passed" if not FAILED else f"{len(FAILED)} checks failed: {FAILED}")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
