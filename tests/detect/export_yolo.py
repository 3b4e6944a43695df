"""Export YOLOv8n, YOLO11n and YOLOv5nu from ultralytics' model definitions to ONNX, for tests and examples.

Runs in the ultralytics venv that ``make yolo-models`` makes (``.venv-yolo``; ultralytics is AGPL and
pulls a torchvision that cannot import beside this machine's CPU torch, so it never enters the project
venv and ``trtforge/`` never imports it). No weights are downloaded: each model is built from its yaml
with random weights, then made to look trained enough for NMS to have work to do:

1. BatchNorm statistics re-estimated on 16 letterboxed photos from ``skimage.data`` (train mode,
   cumulative averages, no gradient); with the random init's statistics every activation shrinks to
   almost nothing and every anchor scores alike.
2. The class logits rescaled per model (one scale and shift for all classes) so that a few hundred of
   the anchors score above 0.25, as a trained model's do on a busy photo; ultralytics' prior bias
   (``Detect.bias_init``) leaves every score near 1e-4.

Then BatchNorm is folded (``model.fuse()``, as ultralytics' exporter does) and the model exported with
the head in export mode: one output ``(N, 4 + 80, A)``, boxes as cx, cy, w, h in input pixels and
class scores after the sigmoid. Writes, into OUT (default ``.venv-yolo/models``):

- ``yolov8n.onnx``, ``yolo11n.onnx``, ``yolov5nu.onnx``: input ``images (1, 3, S, S)`` float32 in [0, 1]
  (RGB, letterboxed with grey 114), output ``output0 (1, 84, A)``: static shapes, as ultralytics' own
  ``export(format="onnx")`` writes them (``--dynamic-batch`` makes the batch dynamic);
- ``yolov8n_dynamic.onnx``: the same YOLOv8n with a dynamic batch and image size, as ultralytics'
  ``export(format="onnx", dynamic=True)`` writes it (``output0 (batch, 84, anchors)``, though the exporter
  declares the 84 as a name too);
- ``photos.npz``: ``images (16, 3, S, S)`` uint8, the letterboxed photos; ``scale``, ``pad`` per photo;
- ``<model>.raw.npy``: PyTorch's raw head output on those photos (float32, ``(16, 84, A)``).

Usage: ``.venv-yolo/bin/python tests/detect/export_yolo.py [OUT] [--size 320]``
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

MODELS = ("yolov8n", "yolo11n", "yolov5nu")
PHOTO_NAMES = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina")
#: Target of the class-logit rescaling: mean and spread of each anchor's logits over the photos.
LOGIT_MEAN, LOGIT_STD = -6.0, 2.0


def letterboxed_photos(count: int, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` crops of varied aspect from skimage's photos, letterboxed to ``size``² (NCHW uint8)."""
    from PIL import Image
    from skimage import data

    rng = np.random.default_rng(seed)
    photos = [np.ascontiguousarray(getattr(data, n)()[..., :3]) for n in PHOTO_NAMES]
    out = np.full((count, size, size, 3), 114, np.uint8)
    scales, pads = np.empty(count, np.float32), np.empty((count, 2), np.float32)
    for i in range(count):
        img = photos[i % len(photos)]
        h, w = img.shape[:2]
        ch, cw = int(h * rng.uniform(0.5, 1.0)), int(w * rng.uniform(0.5, 1.0))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        crop = img[y : y + ch, x : x + cw]
        scale = size / max(ch, cw)
        nh, nw = round(ch * scale), round(cw * scale)
        top, left = (size - nh) // 2, (size - nw) // 2
        out[i, top : top + nh, left : left + nw] = np.asarray(Image.fromarray(crop).resize((nw, nh), Image.BILINEAR))
        scales[i], pads[i] = scale, (left, top)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2)), scales, pads


def reestimate_batchnorm(model, x) -> None:
    """BatchNorm running statistics = the statistics of ``x`` (train mode, cumulative average, no gradient)."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        model(x)
    model.eval()


def rescale_class_logits(model, x) -> None:
    """Scale and shift the head's last class convolutions so the logits on ``x`` have LOGIT_MEAN ± LOGIT_STD."""
    import torch

    head = model.model[-1]
    logits = []
    hooks = [seq[-1].register_forward_hook(lambda _m, _i, o: logits.append(o)) for seq in head.cv3]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    values = torch.cat([t.flatten() for t in logits])
    a = LOGIT_STD / float(values.std())
    b = LOGIT_MEAN - a * float(values.mean())
    with torch.no_grad():
        for seq in head.cv3:
            conv = seq[-1]
            conv.weight.mul_(a)
            conv.bias.mul_(a).add_(b)


def export(name: str, x, out: Path) -> None:
    import torch
    from ultralytics import YOLO

    torch.manual_seed(0)
    model = YOLO(f"{name}.yaml").model.float()
    reestimate_batchnorm(model, x)
    rescale_class_logits(model, x)
    model = model.fuse().eval()
    head = model.model[-1]
    head.export, head.format, head.dynamic = True, "onnx", False
    with torch.no_grad():
        raw = model(x)
        raw = raw[0] if isinstance(raw, (tuple, list)) else raw
    np.save(out / f"{name}.raw.npy", raw.numpy().astype(np.float32))
    torch.onnx.export(model, (x[:1],), str(out / f"{name}.onnx"), dynamo=False, opset_version=17,
                      input_names=["images"], output_names=["output0"])
    if name == "yolov8n":  # as ultralytics' export(format="onnx", dynamic=True) writes it: batch and size dynamic
        head.dynamic = True
        torch.onnx.export(model, (x[:1],), str(out / f"{name}_dynamic.onnx"), dynamo=False, opset_version=17,
                          input_names=["images"], output_names=["output0"],
                          dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"},
                                        "output0": {0: "batch", 2: "anchors"}})
    scores = raw[:, 4:].amax(1)
    print(f"{name}: {tuple(raw.shape)}, anchors above 0.25 per photo: {float((scores > 0.25).sum(1).float().mean()):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=".venv-yolo/models")
    parser.add_argument("--size", type=int, default=320)
    args = parser.parse_args()
    os.environ.setdefault("YOLO_OFFLINE", "1")
    import torch

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    images, scales, pads = letterboxed_photos(16, args.size)
    np.savez(out / "photos.npz", images=images, scale=scales, pad=pads)
    x = torch.from_numpy(images).float() / 255
    for name in MODELS:
        export(name, x, out)


if __name__ == "__main__":
    main()
