"""Predictor preprocessing against PIL/NumPy references, DETR decoding against a reference, bad images."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from skimage import data

import trtforge
from trtforge.core.preprocessing import ImageInputError
from trtforge.vision import Predictor, PreprocessConfig, Preprocessor, decode_image
from trtforge.vision.decode import detections_from_topk, detr_box_transform, detr_topk
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING

CONFIG = PreprocessConfig.from_dict(LITE0_PREPROCESSING)
MEAN = np.array(LITE0_PREPROCESSING["mean"])
STD = np.array(LITE0_PREPROCESSING["std"])


def resize_bilinear_reference(image: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Bilinear resize in float64, half-pixel centres, no antialias, edge-clamped (NumPy only)."""

    def taps(n_in: int, n_out: int):
        src = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, None)
        i0 = np.minimum(np.floor(src).astype(int), n_in - 1)
        return i0, np.minimum(i0 + 1, n_in - 1), src - i0

    y0, y1, wy = taps(image.shape[0], out_h)
    x0, x1, wx = taps(image.shape[1], out_w)
    img = image.astype(np.float64)
    wx = wx[None, :, None]
    top = img[y0][:, x0] * (1 - wx) + img[y0][:, x1] * wx
    bottom = img[y1][:, x0] * (1 - wx) + img[y1][:, x1] * wx
    return top * (1 - wy[:, None, None]) + bottom * wy[:, None, None]


def _pixels(model_input: torch.Tensor) -> np.ndarray:
    """Model input (1, 3, H, W) back to [0, 1] pixels HWC, to compare in units of 1/255."""
    x = model_input[0].double().numpy().transpose(1, 2, 0)
    return x * STD + MEAN


@pytest.mark.parametrize("size", [(720, 1280), (300, 451), (97, 64)], ids=["down-16:9", "down", "up"])
def test_preprocessing_matches_numpy_reference_within_1_over_255(tmp_path, size):
    photo = np.asarray(Image.fromarray(data.chelsea()).resize(size[::-1], Image.BICUBIC))
    path = tmp_path / "photo.png"
    Image.fromarray(photo).save(path)
    ours = _pixels(Preprocessor(CONFIG, torch.device("cpu"))([decode_image(path)]))
    # Reference: PIL decode, NumPy resize and scale.
    reference = resize_bilinear_reference(np.asarray(Image.open(path).convert("RGB")), 224, 224) / 255.0
    assert np.abs(ours - reference).max() <= 1 / 255


def test_antialias_record_matches_pil_bilinear_within_1_over_255():
    config = PreprocessConfig.from_dict({**LITE0_PREPROCESSING, "antialias": True})
    photo = data.astronaut()  # 512², downscaled to 224²: PIL's bilinear filter antialiases
    ours = _pixels(Preprocessor(config, torch.device("cpu"))([photo]))
    pil = np.asarray(Image.fromarray(photo).resize((224, 224), Image.BILINEAR), np.float64) / 255.0
    assert np.abs(ours - pil).max() <= 1 / 255


def resize_bicubic_reference(image: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Bicubic (Keys, a = -0.75), half-pixel centres, no antialias, edge-clamped taps; float64 NumPy."""

    def weights(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
        src = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
        base = np.floor(src).astype(int)
        t = np.abs(src[:, None] - (base[:, None] + np.arange(-1, 3)))  # distance to the 4 taps
        a = -0.75
        near = ((a + 2) * t - (a + 3)) * t * t + 1
        far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
        return np.clip(base[:, None] + np.arange(-1, 3), 0, n_in - 1), np.where(t <= 1, near, far)

    (yi, wy), (xi, wx) = weights(image.shape[0], out_h), weights(image.shape[1], out_w)
    rows = np.einsum("ok,okwc->owc", wy, image.astype(np.float64)[yi])
    return np.einsum("pk,opkc->opc", wx, rows[:, xi])


@pytest.mark.parametrize("size", [(300, 451), (97, 64)], ids=["down", "up"])
def test_bicubic_record_matches_numpy_reference(size):
    photo = np.asarray(Image.fromarray(data.chelsea()).resize(size[::-1], Image.BILINEAR))
    config = PreprocessConfig.from_dict({**LITE0_PREPROCESSING, "interpolation": "bicubic"})
    ours = _pixels(Preprocessor(config, torch.device("cpu"))([photo]))
    reference = resize_bicubic_reference(photo, 224, 224) / 255.0
    assert np.abs(ours - reference).max() <= 1e-4  # float32 weights against float64, in [0, 1] pixel units


def test_nearest_record_picks_torch_nearest_source_pixels():
    """``nearest`` is torch's mode="nearest": source index floor(i * (in / out)) in float32, no half-pixel offset."""
    photo = np.asarray(Image.fromarray(data.chelsea()).resize((451, 300), Image.BILINEAR))
    config = PreprocessConfig.from_dict({**LITE0_PREPROCESSING, "interpolation": "nearest", "antialias": True})
    ours = _pixels(Preprocessor(config, torch.device("cpu"))([photo]))
    rows = np.minimum(np.floor(np.arange(224, dtype=np.float32) * np.float32(300 / 224)).astype(int), 299)
    cols = np.minimum(np.floor(np.arange(224, dtype=np.float32) * np.float32(451 / 224)).astype(int), 450)
    np.testing.assert_allclose(ours, photo[rows][:, cols] / 255.0, rtol=0, atol=1e-6)


def test_bgr_record_swaps_channels():
    photo = data.astronaut()
    rgb = Preprocessor(PreprocessConfig((224, 224)), torch.device("cpu"))([photo])
    bgr = Preprocessor(PreprocessConfig((224, 224), channel_order="BGR"), torch.device("cpu"))([photo])
    torch.testing.assert_close(bgr, rgb.flip(1))


def detr_reference(logits, boxes, height, width, k, threshold):
    """Plain loops: every (query, class) pair, sigmoid, sort, take k, convert, threshold."""
    pairs = []
    for q in range(logits.shape[0]):
        for c in range(logits.shape[1]):
            pairs.append((1 / (1 + np.exp(-logits[q, c])), q, c))
    pairs.sort(key=lambda p: -p[0])
    out = []
    for score, q, c in pairs[:k]:
        if score <= threshold:
            continue
        cx, cy, w, h = boxes[q]
        out.append((score, c, [(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height]))
    return out


def test_detr_decoding_matches_reference_on_crafted_tensors():
    rng = np.random.default_rng(0)
    queries, classes, k = 30, 5, 10
    logits = rng.normal(-4, 1, (2, queries, classes)).astype(np.float32)
    # Crafted: strong pairs, one query strong in two classes, one pair just under the threshold.
    logits[0, 3, 1], logits[0, 3, 4], logits[0, 17, 0], logits[0, 29, 2] = 5.0, 3.0, 2.0, -0.01
    logits[1, 0, 4] = 1.0
    boxes = rng.uniform(0.1, 0.6, (2, queries, 4)).astype(np.float32)
    sizes = [(720, 1280), (480, 640)]
    top = detr_topk(torch.from_numpy(logits), torch.from_numpy(boxes), torch.tensor(sizes), k=k)
    ours = detections_from_topk(top, threshold=0.5, labels=["a", "b", "c", "d", "e"])
    assert [len(d) for d in ours] == [3, 1]
    for b, (height, width) in enumerate(sizes):
        ref = detr_reference(logits[b], boxes[b], height, width, k, 0.5)
        assert len(ours[b]) == len(ref)
        np.testing.assert_allclose(ours[b].confidence, [r[0] for r in ref], rtol=1e-6)
        np.testing.assert_array_equal(ours[b].class_id, [r[1] for r in ref])
        np.testing.assert_allclose(ours[b].xyxy, [r[2] for r in ref], rtol=1e-5)
    assert ours[0].label == ("b", "e", "a")


def test_detr_fp16_selection_matches_fp32_on_fp16_logits():
    """Logits a FP16 model produced are exact in FP16: selecting on FP16 keys picks the same pairs."""
    every_fp16 = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    pool = every_fp16[every_fp16.abs() < 8]  # distinct, FP16-exact, sigmoid still distinct in FP32
    generator = torch.Generator().manual_seed(0)
    logits = torch.stack([pool[torch.randperm(len(pool), generator=generator)[:24000]] for _ in range(2)])
    logits = logits.view(2, 300, 80)
    boxes = torch.rand(2, 300, 4, generator=generator)
    sizes = torch.tensor([(720, 1280), (480, 640)])
    fp32 = detr_topk(logits, boxes, sizes, k=100)
    fp16 = detr_topk(logits, boxes, k=100, box_transform=detr_box_transform(sizes), select_dtype=torch.float16)
    for a, b in zip(fp16, fp32, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match="one of them"):
        detr_topk(logits, boxes, k=100)


@pytest.mark.slow
@pytest.mark.parametrize("route", ["onnxruntime", "eager"])
def test_predictor_classifies_real_photo_like_the_model(lite0_sidecar, lite0, route):
    photo = data.chelsea()  # a tabby cat
    with trtforge.load(lite0_sidecar, route=route) as engine:
        predict = Predictor(engine, task="classification", top_k=5)
        single = predict(photo)
        batch = predict([photo, Image.fromarray(data.astronaut()), photo[:200, :300]])
    x = Preprocessor(CONFIG, torch.device("cpu"))([photo])
    with torch.inference_mode():
        expected = lite0(x).softmax(-1)[0].topk(5)
    np.testing.assert_array_equal(single.class_id, expected.indices.numpy())
    np.testing.assert_allclose(single.score, expected.values.numpy(), rtol=1e-4, atol=1e-5)
    assert single.class_id[0] in (281, 282, 285)  # tabby, tiger cat, Egyptian cat
    assert len(batch) == 3 and batch[0].class_id[0] == single.class_id[0]


@pytest.mark.parametrize(
    ("image", "error", "fragment"),
    [
        ({"pixels": 1}, ImageInputError, "unknown image type dict"),
        (np.zeros((32, 32, 3), np.float32), ImageInputError, "dtype float32"),
        (np.zeros((32, 32, 4), np.uint8), ImageInputError, "x[..., :3]"),
        (torch.zeros(3, 32, 32, dtype=torch.uint8), ImageInputError, "permute(1, 2, 0)"),
        ("/nonexistent/cat.jpg", FileNotFoundError, "no image file"),
    ],
    ids=["type", "dtype", "rgba", "chw", "path"],
)
def test_bad_images_refused_with_the_fix(lite0_sidecar, image, error, fragment):
    with trtforge.load(lite0_sidecar, route="eager") as engine:
        with pytest.raises(error) as info:
            Predictor(engine)(image)
    assert fragment in str(info.value)


def test_artifact_predictor_uses_the_sidecar_record(lite0_sidecar):
    from trtforge.artifact import Artifact
    from trtforge.core.sidecar import read_sidecar

    sidecar = read_sidecar(lite0_sidecar)
    art = Artifact(sidecar.engine_path, lite0_sidecar, lite0_sidecar.parent / "efficientnet_lite0_fp32.onnx",
                   lite0_sidecar.parent / "efficientnet_lite0_fp32.onnx", sidecar)
    predict = art.predictor(route="onnxruntime", top_k=3)
    assert predict.pre.config.size == (224, 224) and predict.engine.route == "onnxruntime"
    assert predict(data.chelsea()).class_id[0] in (281, 282, 285)


@pytest.mark.slow
def test_predictor_feeds_an_fp16_input_engine_in_fp16(lite0):
    from trtforge.core.specs import TensorSpec
    from trtforge.runtime.torch_routes import TorchEngine

    photo = data.chelsea()
    fp32 = TorchEngine(lite0, [TensorSpec("images", "float32", (-1, 3, 224, 224))], ["logits"], device="cpu")
    fp16_io = TorchEngine(lite0, [TensorSpec("images", "float16", (-1, 3, 224, 224))], ["logits"], device="cpu")
    a = Predictor(fp32, LITE0_PREPROCESSING)(photo)
    b = Predictor(fp16_io, LITE0_PREPROCESSING)(photo)  # an FP32 batch would be refused by the engine
    assert a.class_id[0] == b.class_id[0]
    np.testing.assert_allclose(a.score, b.score, atol=2e-2)


@pytest.mark.slow
def test_frames_on_another_device_are_refused_by_name(lite0_sidecar):
    """A frame on a device other than the predictor's (meta here, another GPU on a GPU machine) is
    refused with the frame's index and both devices; host frames keep the staged copy."""
    from trtforge.runtime.placement import InputOnAnotherDevice

    pre = Preprocessor(PreprocessConfig.from_dict(LITE0_PREPROCESSING), torch.device("cpu"))
    host = np.full((32, 48, 3), 7, np.uint8)
    with pytest.raises(InputOnAnotherDevice, match=r"^input 'image 1' is on meta; this engine runs on cpu"):
        pre.upload([host, torch.zeros(32, 48, 3, dtype=torch.uint8, device="meta")])
    assert torch.equal(pre.upload([host, torch.from_numpy(host)]), torch.from_numpy(np.stack([host, host])))
    with trtforge.load(lite0_sidecar, route="eager", device="cpu") as engine:
        with pytest.raises(InputOnAnotherDevice, match="'image 0' is on meta"):
            Predictor(engine)(torch.zeros(224, 224, 3, dtype=torch.uint8, device="meta"))
