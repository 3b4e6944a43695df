"""Issue 37: a detector that is the user's own PyTorch module (no zoo factory, no TensorRT engine: the H200 case) served
on a PyTorch route. The sidecar names the user's factory ``module:function`` and records the NMS; ``serve
--trust-factory`` imports it in Triton's stub from the serving folder, and the route appends the NMS. Each request of
1 to 3 images, sent concurrently through the dynamic batcher, gets the four EfficientNMS outputs of its own images,
bit-equal to the same route run offline. Without ``--trust-factory`` the server refuses in one line before Triton
(Python and CLI)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from cli_in_process import run
from detect_reference import yolo_file

from trtforge.core.postprocess import NMS, NMS_OUTPUTS, NMS_ROUNDS

#: The user's module: images (N, 3, 16, 16) → a yolo raw head (N, 84, A); an image's first pixel picks which of
#: yolov8n's saved heads (real photos' heads, varied detections) it returns, so rows moved between requests show.
USER_MODULE = '''
import numpy as np
import torch


class SavedHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = torch.nn.Parameter(torch.from_numpy(np.load({raw!r})[:8]), requires_grad=False)

    def forward(self, images):
        return self.heads[images[:, 0, 0, 0].long()]


def make_detector():
    return SavedHeads().eval()
'''
NMS_SETTINGS = NMS("yolo", score_threshold=0.3, max_detections=20)
SIZES = (1, 3, 2, 1, 2, 3)


def detector_artifact(folder):
    from trtforge.core.hashing import sha256_file
    from trtforge.core.sidecar import Sidecar, write_sidecar
    from trtforge.core.specs import TensorSpec

    (folder / "user_detector.py").write_text(USER_MODULE.format(raw=str(yolo_file("yolov8n.raw.npy"))))
    engine = folder / "detector.engine"
    engine.write_bytes(b"placeholder: a PyTorch route serves this artifact, which never reads the engine\n")
    k = NMS_SETTINGS.max_detections
    outputs = (TensorSpec("num_detections", "int32", (-1, 1)), TensorSpec("detection_boxes", "float32", (-1, k, 4)),
               TensorSpec("detection_scores", "float32", (-1, k)), TensorSpec("detection_classes", "int32", (-1, k)))
    return write_sidecar(folder / "detector.json", Sidecar(
        name="detector", engine_file=engine.name, engine_size=engine.stat().st_size, engine_sha256=sha256_file(engine),
        inputs=(TensorSpec("images", "float32", (-1, 3, 16, 16)),), outputs=outputs,
        profiles=({"images": {"min": [1, 3, 16, 16], "opt": [2, 3, 16, 16], "max": [4, 3, 16, 16]}},),
        precision={"built": "fp32"}, builder={"flavour": "tensorrt_rtx"},
        source={"kind": "torch", "factory": "user_detector:make_detector"},
        graph_edits={"nms": {**NMS_SETTINGS.as_dict(), "rounds": NMS_ROUNDS, "outputs": list(NMS_OUTPUTS)}}))


@pytest.mark.slow
def test_a_users_detector_module_is_served_with_its_nms(tmp_path, monkeypatch):
    import trtforge
    from tests.serve.conftest import serve_config
    from trtforge.core.errors import Unsupported
    from trtforge.serve.server import Server

    artifact = detector_artifact(tmp_path)
    monkeypatch.chdir(tmp_path)  # the user serves from the folder that holds their module
    with pytest.raises(Unsupported, match=r"user_detector:make_detector.*outside.*trust_factory=True \(ServeConfig") as refused:
        Server([artifact], serve_config(route="eager"))
    assert "\n" not in str(refused.value)
    refused_cli = run(["serve", str(artifact), "--route", "eager"])  # the CLI names its flag, before Triton
    assert refused_cli.returncode == 2 and "pass --trust-factory if you trust the sidecar" in refused_cli.stderr
    assert len(refused_cli.stderr.strip().splitlines()) == 1, refused_cli.stderr

    images = np.zeros((8, 3, 16, 16), np.float32)
    images[:, 0, 0, 0] = np.arange(8)
    monkeypatch.syspath_prepend(str(tmp_path))  # offline, the user's process imports their module as usual
    with trtforge.load(artifact, route="eager", device="cpu", trust_factory=True) as engine:  # one image at a time
        alone = [{k: np.asarray(v)[0] for k, v in engine(images[i:i + 1]).items()} for i in range(8)]
    assert all(int(a["num_detections"][0]) == 20 for a in alone)  # more boxes than max_detections on each
    assert len({a["detection_boxes"].tobytes() for a in alone}) == 8  # images differ: a row in the wrong place shows

    from tritonclient.grpc import InferenceServerClient, InferInput

    requests = [[(i * 3 + k) % 8 for k in range(SIZES[i % len(SIZES)])] for i in range(24)]
    with Server([artifact], serve_config(route="eager", trust_factory=True, max_delay_ms=20)) as server:
        client = InferenceServerClient(server.url("grpc"))

        def infer(rows: list[int]) -> dict[str, np.ndarray]:
            tensor = InferInput("images", [len(rows), 3, 16, 16], "FP32")
            tensor.set_data_from_numpy(images[rows])
            answer = client.infer("detector", [tensor], client_timeout=60)
            return {name: answer.as_numpy(name) for name in NMS_OUTPUTS}

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(infer, requests, timeout=300))
    assert not server.running
    for rows, answer in zip(requests, answers, strict=True):
        assert answer["num_detections"].shape == (len(rows), 1)
        for row, image in enumerate(rows):
            for name in NMS_OUTPUTS:
                np.testing.assert_array_equal(answer[name][row], alone[image][name], err_msg=f"{name} of {image}")
