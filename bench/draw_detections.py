"""Draw a YOLO artifact's detections on photos of different sizes: the picture on docs/tutorial-detect.md.

Builds ``.venv-yolo/models/yolov8n.onnx`` (ultralytics' YOLOv8n definition, random weights, BatchNorm
statistics re-estimated on photos: tests/detect/export_yolo.py) with ``--nms yolo`` and a letterbox
preprocessing record, runs the image predictor (ONNX Runtime route, on the CPU) on two photos of different
sizes in one call, and draws each photo's boxes, in its own pixels, with PIL. The weights are random, so the
boxes show the letterbox and the mapping back, not objects.

    python bench/draw_detections.py [--out docs/img/detections.png] [--max-detections 6]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from skimage import data

import trtforge

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / ".venv-yolo" / "models" / "yolov8n.onnx"
COLOURS = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45")


def photos() -> list[np.ndarray]:
    """A landscape photo and a portrait crop: two sizes, two letterboxes (bands above and below, then beside)."""
    return [data.coffee(), np.ascontiguousarray(data.astronaut()[:, 96:400])]


def draw(photo: np.ndarray, dets) -> Image.Image:
    image = Image.fromarray(photo).convert("RGB")
    pen = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=14)
    for i, (box, score, label) in enumerate(zip(dets.xyxy, dets.confidence, dets.label, strict=True)):
        colour = COLOURS[i % len(COLOURS)]
        pen.rectangle(box.tolist(), outline=colour, width=3)
        text = f"{label} {score:.2f}"
        x, y = float(box[0]) + 3, float(box[1]) + 3
        pen.rectangle(pen.textbbox((x, y), text, font=font), fill=colour)
        pen.text((x, y), text, fill="white", font=font)
    return image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "detections.png")
    parser.add_argument("--max-detections", type=int, default=6)
    args = parser.parse_args()
    if not MODEL.is_file():
        raise SystemExit(f"error: {MODEL} is missing; `make setup` (or `make yolo-models`) exports it")
    with tempfile.TemporaryDirectory() as folder:
        art = trtforge.compile(str(MODEL), precision="fp32", output_dir=folder, dynamic_batch=True, batch="1:2:2",
                               postprocess=trtforge.NMS("yolo", score_threshold=0.25, max_detections=args.max_detections,
                                                        candidates=1000),
                               preprocessing={"resize": [320, 320], "resize_mode": "letterbox"})
        with art.predictor(route="onnxruntime") as predict:
            results = predict(photos())
    panels = [draw(photo, dets) for photo, dets in zip(photos(), results, strict=True)]
    gap = 16
    canvas = Image.new("RGB", (sum(p.width for p in panels) + gap, max(p.height for p in panels)), "white")
    x = 0
    for panel in panels:
        canvas.paste(panel, (x, 0))
        x += panel.width + gap
    args.out.parent.mkdir(parents=True, exist_ok=True)
    canvas.quantize(colors=96, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)  # ~4x smaller
    for photo, dets in zip(photos(), results, strict=True):
        print(f"{photo.shape[1]}x{photo.shape[0]}: {len(dets)} detections, first {dets.label[0]} "
              f"{dets.confidence[0]:.2f} at {np.round(dets.xyxy[0], 1).tolist()}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
