"""Issue 37: a YOLO artifact with the NMS in its graph, served. ``export triton`` writes EfficientNMS's four
outputs (names, int32/float32, dims per image) in config.pbtxt; a real tritonserver (CPU, ONNX Runtime route,
dynamic batching) answers 200 requests of 1 to 4 images, sent concurrently, each with its own images'
detections: equal to the same route run offline on each image alone. The batcher joins requests, so a row
given to the wrong request, or a padded batch read back wrong, shows as another image's detections."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from cli_in_process import run
from detect_reference import yolo_file

from trtforge.core.postprocess import NMS_OUTPUTS

#: Images per request, cycled over the 200 requests: mostly one (each served image costs ~25 ms of ONNX
#: Runtime), every size up to 4.
SIZES = (1, 2, 1, 3, 1, 4, 1, 1)
DTYPES = {"num_detections": "TYPE_INT32", "detection_boxes": "TYPE_FP32", "detection_scores": "TYPE_FP32",
          "detection_classes": "TYPE_INT32"}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """yolov8n (320²) with --nms yolo, batch made dynamic (1..8), FP32: the sidecar."""
    out = tmp_path_factory.mktemp("served_yolo")
    done = run(["build", str(yolo_file("yolov8n.onnx")), "--nms", "yolo", "--precision", "fp32", "--dynamic-batch",
                "--batch", "1:4:8", "--opt-level", "0", "-o", str(out), "-q"])
    assert done.returncode == 0, done.stderr
    return out / "yolov8n_fp32.json"


@pytest.fixture(scope="module")
def server(artifact):
    from tests.serve.conftest import serve_config
    from trtforge.serve.server import Server

    with Server([artifact], serve_config(route="onnxruntime", max_delay_ms=20)) as running:
        yield running
    assert not running.running


def test_export_triton_writes_the_four_outputs(artifact, tmp_path):
    from google.protobuf import json_format, text_format

    from trtforge.serve.repository import model_config_pb2

    done = run(["export", "triton", str(artifact), "--repo", str(tmp_path / "repo")])
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "repo" / "yolov8n" / "config.pbtxt").read_text()
    config = json_format.MessageToDict(text_format.Parse(text, model_config_pb2().ModelConfig()),
                                       preserving_proto_field_name=True)
    assert config["max_batch_size"] == 8 and "dynamic_batching" in config
    assert [(o["name"], o["data_type"], [int(d) for d in o["dims"]]) for o in config["output"]] == [
        ("num_detections", "TYPE_INT32", [1]), ("detection_boxes", "TYPE_FP32", [100, 4]),
        ("detection_scores", "TYPE_FP32", [100]), ("detection_classes", "TYPE_INT32", [100])]


@pytest.mark.slow
def test_each_request_gets_its_own_detections(server, artifact):
    from tritonclient.grpc import InferenceServerClient, InferInput

    from trtforge.runtime.load import load

    images = np.load(yolo_file("photos.npz"))["images"].astype(np.float32) / 255
    with load(artifact, route="onnxruntime") as engine:  # offline, one image at a time
        alone = [{k: np.asarray(v)[0] for k, v in engine(images[i:i + 1]).items()} for i in range(len(images))]
    counts = [int(a["num_detections"][0]) for a in alone]
    assert max(counts) == 100 and 0 < min(counts) < 100  # images differ: a row in the wrong place shows
    config = InferenceServerClient(server.url("grpc")).get_model_config("yolov8n", as_json=True)["config"]
    assert [(o["name"], o["data_type"]) for o in config["output"]] == list(DTYPES.items())
    requests = [[(i * 5 + k) % len(images) for k in range(SIZES[i % len(SIZES)])] for i in range(200)]
    client = InferenceServerClient(server.url("grpc"))  # one channel, shared by the threads

    def infer(rows: list[int]) -> dict[str, np.ndarray]:
        tensor = InferInput("images", [len(rows), *images.shape[1:]], "FP32")
        tensor.set_data_from_numpy(images[rows])
        answer = client.infer("yolov8n", [tensor], client_timeout=120)
        return {name: answer.as_numpy(name) for name in NMS_OUTPUTS}

    execs_before = server_metric(server, "nv_inference_exec_count")
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(infer, requests, timeout=600))
    for rows, answer in zip(requests, answers, strict=True):
        assert answer["num_detections"].shape == (len(rows), 1)
        for row, image in enumerate(rows):
            for name in NMS_OUTPUTS:
                np.testing.assert_array_equal(answer[name][row], alone[image][name], err_msg=f"{name} of {image}")
    executions = server_metric(server, "nv_inference_exec_count") - execs_before
    assert executions < len(requests), f"{executions} model calls for {len(requests)} requests: no batch was formed"


def server_metric(server, name: str) -> float:
    from tests.serve.conftest import metric

    return metric(server, name, model="yolov8n")


def test_sidecar_outputs_are_what_triton_is_told(artifact):
    outputs = json.loads(artifact.read_text())["outputs"]
    assert [(o["name"], o["shape"]) for o in outputs] == [
        ("num_detections", [-1, 1]), ("detection_boxes", [-1, 100, 4]), ("detection_scores", [-1, 100]),
        ("detection_classes", [-1, 100])]
