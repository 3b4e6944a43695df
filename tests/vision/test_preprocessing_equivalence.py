"""Calibration inputs equal inference inputs, for every preprocessing mode, on real photos.

INT8 is calibrated on what ``quantize.data`` makes of an image folder; the engine serves what the
predictor makes of the same images. Both must be the same computation, for every interpolation ×
antialias × layout × channel order. A float64 reference built straight from ``F.interpolate``
guards both sides against being wrong in the same way.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from trtforge.core.specs import TensorSpec
from trtforge.quantize.data import load_calibration
from trtforge.runtime.torch_routes import TorchEngine
from trtforge.vision import Predictor, PreprocessConfig, Preprocessor
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING
from trtforge.zoo.photos import photos

SIZE = (224, 200)  # not square: a swapped height and width shows
MODES = list(itertools.product(("bilinear", "bicubic", "nearest"), (False, True), ("NCHW", "NHWC"), ("RGB", "BGR")))
IDS = [f"{i}-{'aa' if a else 'noaa'}-{layout}-{order}" for i, a, layout, order in MODES]


def record(interpolation: str, antialias: bool, layout: str, order: str) -> dict:
    return {**LITE0_PREPROCESSING, "resize": list(SIZE), "interpolation": interpolation, "antialias": antialias,
            "layout": layout, "channel_order": order}


def input_shape(layout: str) -> tuple[int, ...]:
    return (-1, 3, *SIZE) if layout == "NCHW" else (-1, *SIZE, 3)


@pytest.fixture(scope="module")
def photo_dir(tmp_path_factory):
    """Real photos as PNGs: downscaled (to 224×200) ones of several aspect ratios, and an upscaled crop."""
    folder = tmp_path_factory.mktemp("photos")
    chelsea, coffee, rocket, astronaut = photos(("chelsea", "coffee", "rocket", "astronaut"))
    images = {"a_chelsea": chelsea, "b_coffee": coffee, "c_rocket": rocket, "d_astronaut": astronaut,
              "e_crop": np.ascontiguousarray(chelsea[100:197, 200:264])}  # 97×64: upsampled
    for name, image in images.items():
        Image.fromarray(image).save(folder / f"{name}.png")
    return folder


def calibration_inputs(folder, pp: dict) -> list[np.ndarray]:
    """What quantize/data.py feeds the calibrator for the image folder."""
    spec = [("images", np.dtype(np.float32), (None, *input_shape(pp["layout"])[1:]))]
    return [sample["images"] for sample in load_calibration(folder, spec, pp)]


class Recorder(torch.nn.Module):
    """A model that keeps every input it is given (through ``sink``) and returns ten zero logits."""

    def __init__(self, sink) -> None:
        super().__init__()
        self.sink = sink  # a builtin method: the engine's deepcopy of the module keeps it as it is

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.sink(images.detach().clone())
        return images.new_zeros(images.shape[0], 10)


def inference_inputs(paths, pp: dict, compile_preprocessing: bool = False) -> list[np.ndarray]:
    """What the predictor feeds the engine (eager route on the CPU), one photo per call."""
    seen: list[torch.Tensor] = []
    engine = TorchEngine(Recorder(seen.append), [TensorSpec("images", "float32", input_shape(pp["layout"]))],
                         ["logits"], device="cpu")
    predict = Predictor(engine, pp, top_k=1, cuda_graph=False, compile_preprocessing=compile_preprocessing)
    for path in paths:
        predict(path)
    return [x.numpy() for x in seen]


def float64_reference(path, pp: dict) -> np.ndarray:
    """PIL decode, F.interpolate in float64, then channel order, scale, mean, std and layout by hand."""
    rgb = torch.from_numpy(np.asarray(Image.open(path).convert("RGB"))).permute(2, 0, 1)[None].double()
    mode = pp["interpolation"]
    kwargs = {} if mode == "nearest" else {"align_corners": False, "antialias": pp["antialias"]}
    x = F.interpolate(rgb, size=SIZE, mode=mode, **kwargs)[0].permute(1, 2, 0).numpy()  # HWC, RGB
    if pp["channel_order"] == "BGR":
        x = x[..., ::-1]  # mean and std are in the model's channel order
    x = (x * pp["scale"] - np.array(pp["mean"])) / np.array(pp["std"])
    return (x.transpose(2, 0, 1) if pp["layout"] == "NCHW" else x)[None]


@pytest.mark.slow
@pytest.mark.parametrize(("interpolation", "antialias", "layout", "order"), MODES, ids=IDS)
def test_calibration_inputs_equal_inference_inputs(photo_dir, interpolation, antialias, layout, order):
    pp = record(interpolation, antialias, layout, order)
    calibration = calibration_inputs(photo_dir, pp)
    inference = inference_inputs(sorted(photo_dir.glob("*.png")), pp)
    assert len(calibration) == len(inference) == 5
    expected_shape = (1, 3, *SIZE) if layout == "NCHW" else (1, *SIZE, 3)
    for cal, inf, path in zip(calibration, inference, sorted(photo_dir.glob("*.png")), strict=True):
        assert cal.shape == inf.shape == expected_shape and cal.dtype == inf.dtype == np.float32
        np.testing.assert_array_equal(cal, inf, err_msg=path.name)  # one computation: the same bits
        # float32 resize weights and pixels against float64: within 2e-4 of the normalised value (~1/20 of 1/255).
        np.testing.assert_allclose(cal, float64_reference(path, pp), rtol=0, atol=2e-4, err_msg=path.name)


@pytest.mark.parametrize(("interpolation", "antialias", "layout", "order"),
                         [("bicubic", True, "NHWC", "BGR"), ("nearest", False, "NCHW", "RGB")],
                         ids=["bicubic-aa-NHWC-BGR", "nearest-noaa-NCHW-RGB"])
@pytest.mark.slow
def test_fused_preprocessing_feeds_the_calibrated_inputs(photo_dir, interpolation, antialias, layout, order):
    """compile_preprocessing=True (torch.compile, one Inductor kernel): the same function within float rounding.

    Two photos, one scaled down and one up: each frame size compiles once, and Dynamo allows 8
    compiles of one function per process, so the test starts from an empty compile cache.
    """
    torch._dynamo.reset()
    pp = record(interpolation, antialias, layout, order)
    paths = sorted(photo_dir.glob("*.png"))
    calibration = calibration_inputs(photo_dir, pp)
    fused = inference_inputs([paths[0], paths[4]], pp, compile_preprocessing=True)
    for cal, inf in zip([calibration[0], calibration[4]], fused, strict=True):
        assert inf.shape == cal.shape
        np.testing.assert_allclose(inf, cal, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_fused_preprocessing_past_the_recompile_limit_runs_the_same_function(caplog):
    """Frame sizes past Dynamo's recompile limit in one process: unfused, same values, one warning; no failure.

    The limit is Dynamo's setting (8 by default; the warning tells users to raise it). At 2 the same path
    comes after two compiles instead of eight: each compile is a C++ kernel built by g++ (about 1.5 CPU s).
    """
    from trtforge.vision.preprocess import _warn_unfused

    torch._dynamo.reset()
    _warn_unfused.cache_clear()  # it warns once per process
    pre = Preprocessor(PreprocessConfig((8, 6), interpolation="bicubic", antialias=True), torch.device("cpu"))
    rng = np.random.default_rng(0)
    with torch._dynamo.config.patch(recompile_limit=2):
        for side in range(10, 14):  # two sizes compile, two run past the limit
            u8 = torch.from_numpy(rng.integers(0, 256, (1, side, side + 3, 3), dtype=np.uint8))
            torch.testing.assert_close(pre.transform(u8, fused=True), pre.transform(u8), rtol=0, atol=1e-5)
    assert sum("recompile limit" in r.getMessage() for r in caplog.records) == 1
