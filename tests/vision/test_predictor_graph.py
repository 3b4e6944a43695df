"""The predictor's one-graph path: packed results, the frame-buffer fast path, against the plain path,
on the PyTorch routes and on the TensorRT route (through the TensorRT double).

CUDA graphs cannot be captured on this machine, so the graph cache is replaced by
``EagerReplayGraphCacheDouble``: it keeps the first function it is given per key and re-runs it
on every replay, which is what a replay does to the captured buffers. The same comparison on the
H200, with real graphs, is in bench/routes_gpu.py (``frame_buffer_graph_vs_upload_path``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import pytest
import torch
from skimage import data
from trt_double import FAKE_TRT, FakeTrtRuntime, write_fake_engine

from trtforge.core.errors import InvalidArgument
from trtforge.core.specs import TensorSpec
from trtforge.runtime.protocol import CapturableEngine
from trtforge.runtime.tensorrt_route import TensorRTEngine
from trtforge.runtime.torch_routes import TorchEngine
from trtforge.vision import Predictor, PreprocessConfig, Preprocessor
from trtforge.vision.packing import PackedLayout
from trtforge.vision.predictor import fuse_preprocessing_by_default
from trtforge.zoo.detr_like import detr_like
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING


class EagerReplayGraphCacheDouble:
    """Test double of ``runtime.cuda_graph.GraphCache``: 'captures' by keeping fn, 'replays' by calling it."""

    def __init__(self) -> None:
        self._fns: dict[Hashable, Callable[[], Any]] = {}
        self.captures = 0
        self.replays = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._fns

    def __len__(self) -> int:
        return len(self._fns)

    def replay(self, key: Hashable, fn: Callable[[], Any] | None) -> Any:
        if key not in self._fns:
            assert fn is not None, "a replay without a capture"
            self._fns[key] = fn
            self.captures += 1
        self.replays += 1
        return self._fns[key]()

    def clear(self) -> None:
        self._fns.clear()


def test_packed_layout_round_trips_mixed_dtypes_aligned():
    tensors = (torch.rand(2, 5), torch.arange(10).view(2, 5), torch.rand(3).half(), torch.tensor([True, False]),
               torch.rand(2, 5, 4))
    layout = PackedLayout.of(tensors)
    packed = layout.pack(tensors)
    assert packed.dtype == torch.uint8 and packed.numel() == layout.nbytes == sum(t.numel() * t.element_size() for t in tensors)
    for dtype, _shape, start, _stop in layout.fields:
        assert start % dtype.itemsize == 0  # every field starts aligned to its item size
    arrays = layout.unpack(packed.numpy())
    for t, a in zip(tensors, arrays, strict=True):
        np.testing.assert_array_equal(a, t.numpy())
        assert a.dtype == t.numpy().dtype and a.shape == tuple(t.shape)
    with pytest.raises(ValueError, match="bytes"):
        layout.unpack(packed.numpy()[:-1])
    with pytest.raises(TypeError, match="cannot pack"):
        PackedLayout.of((torch.rand(2, dtype=torch.float64),))


def test_frame_buffer_of_accepts_only_exact_views_of_the_buffer():
    pre = Preprocessor(PreprocessConfig.from_dict(LITE0_PREPROCESSING), torch.device("cpu"))
    frames = pre.frame_buffer(2, 48, 64)
    assert pre.frame_buffer_of([frames[0], frames[1]]) is pre.staging((2, 48, 64, 3))
    assert pre.frame_buffer_of([torch.from_numpy(frames)[0], torch.from_numpy(frames)[1]]) is not None
    assert pre.frame_buffer_of([frames[1], frames[0]]) is None  # order matters
    assert pre.frame_buffer_of([frames[0].copy(), frames[1]]) is None
    assert pre.frame_buffer_of([frames[0]]) is None  # another batch size
    assert pre.frame_buffer_of([frames[0][:, ::-1][:, ::-1], frames[1]]) is not None  # same view, re-sliced
    assert pre.frame_buffer_of([np.lib.stride_tricks.as_strided(frames[0], strides=(64 * 3, 3, 1)), frames[1]]) is not None
    odd = np.lib.stride_tricks.as_strided(frames[0], strides=(32 * 3, 3, 1))  # same start, other rows
    assert pre.frame_buffer_of([odd, frames[1]]) is None
    assert pre.frame_buffer_of([frames[0].view(np.int8), frames[1]]) is None
    assert pre.frame_buffer_of(["cat.jpg", "dog.jpg"]) is None


def _graph_and_plain(engine, task: str, preprocessing: dict) -> tuple[Predictor, Predictor]:
    graph = Predictor(engine, preprocessing, task=task, cuda_graph=False)
    graph._graphs = EagerReplayGraphCacheDouble()  # the graph path, eagerly
    plain = Predictor(engine, preprocessing, task=task, cuda_graph=False)
    return graph, plain


@pytest.mark.slow
def test_one_graph_path_matches_plain_path_classification(lite0):
    engine = TorchEngine(lite0, [TensorSpec("images", "float32", (-1, 3, 224, 224))], ["logits"], device="cpu")
    graph, plain = _graph_and_plain(engine, "classification", LITE0_PREPROCESSING)
    photos = [data.chelsea()[:300, :400], data.astronaut()[:300, :400]]
    frames = graph.frame_buffer(2, 300, 400)
    frames[...] = np.stack(photos)
    # Frame buffer (DMA inside the graph), then the fast path, then pageable copies (upload first).
    first, again, pageable = graph([frames[0], frames[1]]), graph([frames[0], frames[1]]), graph(photos)
    expected = plain(photos)
    for results in (first, again, pageable):
        for ours, ref in zip(results, expected, strict=True):
            np.testing.assert_array_equal(ours.class_id, ref.class_id)
            np.testing.assert_allclose(ours.score, ref.score, rtol=1e-6)
    assert graph._graphs.captures == 2 and graph._graphs.replays == 3  # frame-buffer graph + staged graph
    # Pageable frames go through the predictor's own pinned buffer: the caller's frame buffer keeps its pixels.
    reversed_results = graph(photos[::-1])
    np.testing.assert_array_equal(frames, np.stack(photos))
    assert [r.class_id[0] for r in reversed_results] == [r.class_id[0] for r in expected[::-1]]
    assert graph._graphs.captures == 2  # the same staged graph, replayed
    as_tensors = graph([torch.from_numpy(p.copy()) for p in photos])  # CPU tensors are pageable too
    assert graph._graphs.captures == 2 and [r.class_id[0] for r in as_tensors] == [r.class_id[0] for r in expected]
    frames[0] = photos[1]  # new pixels in the same buffer: the replay reads them
    swapped = graph([frames[0], frames[1]])
    np.testing.assert_array_equal(swapped[0].class_id, expected[1].class_id)
    assert first[0].class_id[0] in (281, 282, 285) and first[0].score.flags.owndata is False
    first[0].score.base[...] = 0  # results own their bytes: a later call does not change them
    np.testing.assert_array_equal(again[0].class_id, expected[0].class_id)


def test_one_graph_path_matches_plain_path_detection():
    model = detr_like(num_classes=5, num_queries=20, decoder_layers=1, image_size=(128, 128))
    engine = TorchEngine(model, [TensorSpec("images", "float32", (-1, 3, 128, 128))], ["logits", "boxes"], device="cpu")
    graph, plain = _graph_and_plain(engine, "detection", {"resize": [128, 128]})
    graph.threshold = plain.threshold = 0.0  # keep the whole top-k
    image = data.astronaut()[:200, :320]
    frames = graph.frame_buffer(1, 200, 320)
    frames[0] = image
    ours, ref = graph(frames[0]), plain(image)
    ours_again = graph(frames[0])
    for result in (ours, ours_again):
        assert len(result) == len(ref) == 100  # every (query, class) pair
        np.testing.assert_array_equal(result.class_id, ref.class_id)
        np.testing.assert_allclose(result.confidence, ref.confidence, rtol=1e-5)
        np.testing.assert_allclose(result.xyxy, ref.xyxy, rtol=1e-4, atol=1e-3)
        assert result.xyxy.dtype == np.float32 and result.class_id.dtype == np.int64
    assert graph._graphs.replays == 2


@pytest.mark.slow
def test_compiled_preprocessing_gives_the_eager_results(lite0):
    """compile_preprocessing=True: one fused kernel (Inductor, here its CPU code), same classes and scores."""
    engine = TorchEngine(lite0, [TensorSpec("images", "float32", (-1, 3, 224, 224))], ["logits"], device="cpu")
    fused = Predictor(engine, LITE0_PREPROCESSING, cuda_graph=False, compile_preprocessing=True)
    fused._graphs = EagerReplayGraphCacheDouble()
    plain = Predictor(engine, LITE0_PREPROCESSING, cuda_graph=False)
    photo = data.chelsea()
    frames = fused.frame_buffer(1, *photo.shape[:2])
    frames[0] = photo
    ours, ref = fused(frames[0]), plain(photo)
    np.testing.assert_array_equal(ours.class_id, ref.class_id)
    np.testing.assert_allclose(ours.score, ref.score, rtol=1e-4, atol=1e-6)
    assert fused.compile_preprocessing and not plain.compile_preprocessing


def test_fused_preprocessing_compiles_once_for_every_predictor(lite0):
    """A second predictor with the same record and frame size reuses the compiled kernel (hot swap, reload)."""
    from torch._dynamo.utils import counters

    engine = TorchEngine(lite0, [TensorSpec("images", "float32", (-1, 3, 224, 224))], ["logits"], device="cpu")
    photo = data.astronaut()[:300, :400]
    first = Predictor(engine, LITE0_PREPROCESSING, cuda_graph=False, compile_preprocessing=True)(photo)
    graphs = counters["stats"]["unique_graphs"]
    again = Predictor(engine, LITE0_PREPROCESSING, cuda_graph=False, compile_preprocessing=True)(photo)
    assert counters["stats"]["unique_graphs"] == graphs >= 1
    np.testing.assert_array_equal(again.class_id, first.class_id)


@pytest.mark.parametrize(("cuda_graph", "device", "triton", "cc", "fused"), [
    (True, "cuda", True, True, True),
    (True, "cuda", False, True, False),   # no Triton: Inductor has no GPU code generator
    (True, "cuda", True, False, False),   # no C compiler: Triton cannot build its launcher
    (False, "cuda", True, True, False),   # the plain path gains little from one fused kernel among many launches
    (True, "cpu", True, True, False),
])
def test_preprocessing_fuses_by_default_only_on_the_graph_path_with_triton(monkeypatch, cuda_graph, device,
                                                                          triton, cc, fused):
    import importlib.util
    import shutil

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (object() if triton else None) if name == "triton" else real(name, *a))
    monkeypatch.setattr(shutil, "which", lambda name, *a: f"/usr/bin/{name}" if cc else None)
    assert fuse_preprocessing_by_default(cuda_graph, torch.device(device)) is fused


def test_predictor_on_the_cpu_keeps_preprocessing_unfused_by_default(lite0):
    engine = TorchEngine(lite0, [TensorSpec("images", "float32", (-1, 3, 224, 224))], ["logits"], device="cpu")
    assert Predictor(engine, LITE0_PREPROCESSING).compile_preprocessing is False


class CallCountingTensorRTEngine(TensorRTEngine):
    """The real TensorRT route, counting which entry point the predictor used."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.entries: list[str] = []

    def capturable_forward(self, *tensors):
        self.entries.append("capturable_forward")
        return super().capturable_forward(*tensors)

    def __call__(self, *tensors, **named):
        self.entries.append("__call__")
        return super().__call__(*tensors, **named)


def test_tensorrt_route_takes_the_one_graph_path(tmp_path):
    """A predictor over the TensorRT route (the double: a global average pool) captures through
    ``capturable_forward``, and gives the plain path's results and the worked numbers."""
    profile = [{"images": [[1, 3, 16, 16], [2, 3, 16, 16], [2, 3, 16, 16]]}]
    path = write_fake_engine(tmp_path, profile, feature_dims=(3, 16, 16), model="channel_mean",
                             preprocessing={"resize": [16, 16]})
    engine = CallCountingTensorRTEngine(path, device="cpu", bindings=FAKE_TRT)
    assert isinstance(engine, CapturableEngine) and engine.sidecar.preprocessing == PreprocessConfig((16, 16))
    assert Predictor(engine).cuda_graph is False  # on by default only when the engine replays graphs itself
    with pytest.raises(InvalidArgument, match="on a CUDA device"):
        Predictor(engine, cuda_graph=True)  # host memory: no CUDA graphs to capture
    graph, plain = _graph_and_plain(engine, "classification", None)  # the record comes from engine.sidecar
    photos = [data.chelsea()[:120, :160], data.coffee()[:120, :160]]
    frames = graph.frame_buffer(2, 120, 160)
    frames[...] = np.stack(photos)
    first, again = graph([frames[0], frames[1]]), graph([frames[0], frames[1]])
    assert engine.entries == ["capturable_forward"] * 2 and graph._graphs.replays == 2
    expected = plain(photos)
    assert engine.entries[-1] == "__call__"
    # Worked numbers: softmax over the channel means of the resized photo scaled to [0, 1].
    pixels = torch.from_numpy(np.stack(photos)).permute(0, 3, 1, 2).float() / 255
    logits = torch.nn.functional.interpolate(pixels, size=(16, 16), mode="bilinear", align_corners=False).mean((2, 3))
    scores, ids = logits.softmax(-1).topk(3, dim=-1)
    for results in (first, again, expected):
        for b, result in enumerate(results):
            np.testing.assert_array_equal(result.class_id, ids[b].numpy())
            np.testing.assert_allclose(result.score, scores[b].numpy(), rtol=1e-5)
    execute = [c for ctx in FakeTrtRuntime.last.engines[0].contexts for c in ctx.calls if c[0] == "execute_async_v3"]
    assert len(execute) == 3  # two replays, one plain call: every result came from the engine
