"""Tutorial: read text with the PP-OCRv4 recogniser from rapidocr_onnxruntime 1.4.4, an ONNX file you did
not export yourself: FP16 with an explicit shape range, then the FP16 graph reads rendered text lines.

    pip install rapidocr_onnxruntime==1.4.4      # the ONNX files are in the wheel: nothing downloads
    python examples/read_text_ocr.py [OUTPUT_DIR]
"""

import sys
from pathlib import Path

import numpy as np
import onnx
import rapidocr_onnxruntime
from PIL import Image, ImageDraw, ImageFont

import trtforge
from trtforge.core.ort_session import session

out = Path(sys.argv[1] if len(sys.argv) > 1 else "trtforge_out/examples")
rec = Path(rapidocr_onnxruntime.__file__).parent / "models" / "ch_PP-OCRv4_rec_infer.onnx"
# Input x is (batch, 3, height, width), all dynamic: give the range the engine serves.
art = trtforge.compile(rec, precision="fp16", name="ppocr_rec",
                       shapes={"x": ((1, 3, 48, 320), (1, 3, 48, 320), (4, 3, 48, 320))}, output_dir=out)
print(f"built: {art.engine_path.name}, input x max {art.sidecar.profiles[0]['x']['max']}")


def render(text: str) -> np.ndarray:
    """A dark text line on light grey with PIL's bundled font, as the recogniser's input (3, 48, 320)."""
    font = ImageFont.load_default(size=32)
    left, top, right, bottom = font.getbbox(text)
    image = Image.new("RGB", (right - left + 16, bottom - top + 16), (235, 235, 235))
    ImageDraw.Draw(image).text((8 - left, 8 - top), text, fill=(20, 20, 20), font=font)
    width = min(320, round(48 * image.width / image.height))
    pixels = np.asarray(image.resize((width, 48), Image.BILINEAR), np.float32).transpose(2, 0, 1)
    x = np.zeros((3, 48, 320), np.float32)
    x[:, :, :width] = (pixels / 255.0 - 0.5) / 0.5
    return x


# The character list is in the model's metadata; index 0 is CTC's blank.
meta = {p.key: p.value for p in onnx.load(rec, load_external_data=False).metadata_props}
charset = ["", *meta["character"].splitlines(), " "]


def decode(probs: np.ndarray) -> str:
    """Greedy CTC: the best class per step, repeats merged, blanks dropped."""
    best = probs.argmax(-1)
    return "".join(charset[i] for j, i in enumerate(best) if i and (j == 0 or i != best[j - 1]))


lines = ["invoice 2048", "total 17.50", "TensorRT"]
batch = np.stack([render(t) for t in lines])
fp16 = session(art.onnx_path).run(None, {"x": batch})[0]  # the FP16 graph the engine was built from
for text, probs in zip(lines, fp16, strict=True):
    print(f"{text!r} read as {decode(probs).strip()!r}")
