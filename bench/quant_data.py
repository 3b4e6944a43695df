"""Rendered text lines for the OCR part of bench/quant_accuracy.py (PIL's bundled font, offline).

Example:
    >>> image, text = text_lines(1, seed=0)[0]
"""

from __future__ import annotations

import numpy as np

WORDS = ("invoice", "total", "order", "date", "amount", "price", "model", "engine", "tensor", "batch",
         "street", "city", "phone", "number", "receipt", "cash", "card", "paid", "item", "quantity")


def text_lines(n: int, seed: int) -> list[tuple[np.ndarray, str]]:
    """``n`` (HxWx3 uint8 image, text) pairs: digits and words, dark on light grey, sizes 24-40 px."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        kind = int(rng.integers(0, 3))
        if kind == 0:
            text = str(int(rng.integers(10, 10**7)))
        elif kind == 1:
            text = " ".join(str(w) for w in rng.choice(WORDS, size=int(rng.integers(1, 3))))
        else:
            text = f"{rng.choice(WORDS)} {int(rng.integers(1, 999))}"
        font = ImageFont.load_default(size=int(rng.integers(24, 40)))
        box = font.getbbox(text)
        w, h = box[2] - box[0] + 16, box[3] - box[1] + 16
        bg = int(rng.integers(190, 256))
        img = Image.new("RGB", (w, h), (bg, bg, bg))
        ImageDraw.Draw(img).text((8 - box[0], 8 - box[1]), text, fill=(int(rng.integers(0, 70)),) * 3, font=font)
        out.append((np.asarray(img), text))
    return out


def ocr_input(image: np.ndarray, height: int = 48, width: int = 320) -> np.ndarray:
    """PP-OCR recogniser preprocessing: resize to ``height`` keeping aspect, (x/255-0.5)/0.5, pad."""
    from PIL import Image

    h, w = image.shape[:2]
    new_w = min(width, int(np.ceil(height * w / h)))
    arr = np.asarray(Image.fromarray(image).resize((new_w, height), Image.BILINEAR), dtype=np.float32)
    arr = (arr.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :new_w] = arr
    return out


def ctc_greedy(probs: np.ndarray, charset: list[str]) -> list[str]:
    """Greedy CTC decode: argmax per step, merge repeats, drop blanks (index 0)."""
    texts = []
    for seq in probs.argmax(axis=-1):
        chars, prev = [], -1
        for idx in seq:
            if idx != prev and idx != 0:
                chars.append(charset[idx] if idx < len(charset) else "")
            prev = idx
        texts.append("".join(chars))
    return texts
