"""uint8 frames in (``input_format="uint8"``): the server runs trtforge's one preprocessing, then the
route; answers equal ``preprocess_images`` + the same route called directly."""

from __future__ import annotations

import numpy as np
import pytest

from tests.serve.artifacts import make_image_artifact
from trtforge.core.errors import InvalidArgument
from trtforge.core.preprocessing import PreprocessConfig, preprocess_images
from trtforge.core.sidecar import read_sidecar
from trtforge.runtime.load import load
from trtforge.serve.frames import frame_specs
from trtforge.serve.repository import plan_model


def infer_frames(server, frames: np.ndarray, dtype: str = "UINT8") -> np.ndarray:
    from tritonclient.grpc import InferenceServerClient, InferInput

    tensor = InferInput("image", list(frames.shape), dtype)
    tensor.set_data_from_numpy(frames)
    return InferenceServerClient(server.url("grpc")).infer("tinyconv", [tensor], client_timeout=30).as_numpy("logits")


@pytest.mark.slow
def test_uint8_frames_are_preprocessed_in_the_server_like_trtforge_does(start_server, tmp_path):
    artifact = make_image_artifact(tmp_path / "image")
    server = start_server([artifact], route="onnxruntime", input_format="uint8")
    frames = np.random.default_rng(0).integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    record = read_sidecar(artifact)
    with load(artifact, route="onnxruntime") as engine:
        reference = np.asarray(engine(preprocess_images(list(frames), PreprocessConfig.of(record.preprocessing)))
                               ["logits"])
    served = infer_frames(server, frames)
    assert served.shape == (3, 2) and np.abs(reference).max() > 1e-3
    np.testing.assert_allclose(served, reference, rtol=1e-5, atol=1e-6)
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match="UINT8|uint8"):  # float frames: refused alone
        infer_frames(server, frames.astype(np.float32), "FP32")
    np.testing.assert_allclose(infer_frames(server, frames[:1]), reference[:1], rtol=1e-5, atol=1e-6)


def test_frame_input_needs_a_preprocessing_record(tmp_path, linear_v1):
    image = read_sidecar(make_image_artifact(tmp_path / "image"))
    assert [(s.name, s.dtype, s.shape) for s in frame_specs(image)] == [("image", "uint8", (-1, 8, 8, 3))]
    assert plan_model(image.path, {"input_format": "uint8"}).inputs == frame_specs(image)
    with pytest.raises(InvalidArgument, match="needs the sidecar's preprocessing record"):
        plan_model(linear_v1, {"input_format": "uint8"})
    with pytest.raises(InvalidArgument, match="not one of"):
        plan_model(linear_v1, {"input_format": "rgb"})


@pytest.mark.parametrize("route", ["onnxruntime", "fp16"])
def test_batcher_joins_frames_into_the_preprocessors_one_staging_buffer(tmp_path, route):
    """The requests' frames are copied once, into the Preprocessor's grow-only buffer (FrameEngine keeps
    none of its own); the call reads them from there and answers like the route on preprocessed frames."""
    import torch

    from tests.serve.artifacts import TinyConv
    from trtforge.runtime.torch_routes import TorchEngine
    from trtforge.serve.batching import check_request, run_together
    from trtforge.serve.frames import FrameEngine

    artifact = make_image_artifact(tmp_path / "image")
    record = read_sidecar(artifact)
    engine = load(artifact, route="onnxruntime") if route == "onnxruntime" else \
        TorchEngine(TinyConv(), record.inputs, record.outputs, route=route, device="cpu")
    frames = FrameEngine(engine, record)
    assert not hasattr(frames, "_pinned")
    rng = np.random.default_rng(1)
    requests = [rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8) for n in (1, 3, 2)]
    checked = [check_request(frames.inputs, {"image": r}, max_batch=8) for r in requests]
    joined = frames.join([c.arrays[0] for c in checked], 8)
    assert frames.preprocessor.is_staged(joined) and not joined[6:].any()
    results, padded = run_together(frames, checked, ["logits"], batched=True, buckets=(8,), with_padding=True)
    assert padded == 2
    x = preprocess_images(list(np.concatenate(requests)), PreprocessConfig.of(record.preprocessing))
    with torch.inference_mode():
        reference = TinyConv()(x).numpy() if route == "fp16" else np.asarray(engine(x)["logits"])
    tolerance = 2e-2 if route == "fp16" else 1e-5
    np.testing.assert_allclose(np.concatenate([r["logits"] for r in results]), reference, rtol=tolerance,
                               atol=tolerance)
    bigger = frames.preprocessor.staged((16, 8, 8, 3))  # grows once; smaller batches reuse it
    assert frames.preprocessor.staged((2, 8, 8, 3)).data_ptr() == bigger.data_ptr()


def test_serve_reads_each_engines_declared_abilities(tmp_path):
    """Issue 36 (routes as data): serve reads what an engine can do from ``runtime/protocol.py``'s protocols. The
    serving benchmark's null model (a ``PassthroughEngine``) gets the uint8 frames as they are; the onnxruntime
    route (an ``EmulatingEngine``, no runtime cache) gets them preprocessed; route ``cuda_graph`` declares graph
    replay but replays none on the CPU; a plain callable names no device and no profiles (warmed at batch 1)."""
    import torch

    from tests.serve.artifacts import TinyConv
    from trtforge.measure.serving import NullEngine
    from trtforge.runtime.protocol import (
        EmulatingEngine,
        PassthroughEngine,
        ReplayingEngine,
        RuntimeCachingEngine,
    )
    from trtforge.runtime.torch_routes import TorchEngine
    from trtforge.serve.backend import warm_input
    from trtforge.serve.batching import check_request, run_together
    from trtforge.serve.frames import FrameEngine

    artifact = make_image_artifact(tmp_path / "image")
    record = read_sidecar(artifact)
    frames = np.random.default_rng(2).integers(0, 256, (2, 8, 8, 3), dtype=np.uint8)
    null = FrameEngine(NullEngine(artifact), record)
    assert null.passthrough and null.preprocessor is None and not null.cuda_graph
    assert null.join([frames], 2) is None and np.array_equal(null(frames)["logits"], np.zeros((2, 2), np.float32))
    with load(artifact, route="onnxruntime") as engine:
        assert isinstance(engine, EmulatingEngine) and engine.evaluator is None
        assert not isinstance(engine, (RuntimeCachingEngine, ReplayingEngine, PassthroughEngine))
        served = FrameEngine(engine, record)
        assert not served.passthrough and not served.cuda_graph
        expected = np.asarray(engine(preprocess_images(list(frames), PreprocessConfig.of(record.preprocessing)))
                              ["logits"])
        np.testing.assert_allclose(served(frames)["logits"], expected, rtol=1e-5, atol=1e-6)
        assert [a.shape for a in warm_input(served)] == [(1, 8, 8, 3)]
    graphs = TorchEngine(TinyConv(), record.inputs, record.outputs, route="cuda_graph", device="cpu")
    assert isinstance(graphs, ReplayingEngine) and graphs.cuda_graph is False
    assert FrameEngine(graphs, record).cuda_graph is False

    def plain(x):
        return {"logits": torch.as_tensor(x)[:, :2].numpy()}

    plain.inputs = record.inputs
    assert [a.shape for a in warm_input(plain)] == [(1, 3, 8, 8)]
    checked = [check_request(record.inputs, {"image": np.ones((n, 3, 8, 8), np.float32)}, max_batch=8)
               for n in (1, 2)]
    assert [r["logits"].shape for r in run_together(plain, checked, ["logits"], batched=True)] == [(1, 2, 8, 8),
                                                                                                    (2, 2, 8, 8)]
