"""Issue 37: ``trtforge build yolov8n.onnx --nms yolo`` builds with TensorRT-RTX at FP32 and FP16 (lowest
optimization level), the NMS nodes stay FP32 by rule, the sidecar lists the four outputs, and the FP32 graph
the engine was built from gives, in ONNX Runtime, exactly greedy NMS's detections on the raw head of the
same 16 letterboxed photos. Bad NMS input is one ``error:`` line before any build."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import numpy as np
import onnx
import pytest
from cli_in_process import run
from detect_reference import assert_same_detections, xywh_to_xyxy, yolo_file

from trtforge.core.ort_session import session
from trtforge.core.postprocess import NMS, NMS_OUTPUTS, NMS_PREFIX
from trtforge.passes.nms import NMS_ROUNDS

OUTPUTS = [("num_detections", "int32", [1, 1]), ("detection_boxes", "float32", [1, 100, 4]),
           ("detection_scores", "float32", [1, 100]), ("detection_classes", "int32", [1, 100])]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """yolov8n with --nms yolo, built at FP32 and FP16: {precision: sidecar}, and the output folder."""
    out = tmp_path_factory.mktemp("yolo_nms")
    sidecars = {}
    for precision in ("fp32", "fp16"):
        done = run(["build", str(yolo_file("yolov8n.onnx")), "--nms", "yolo", "--precision", precision,
                    "--opt-level", "0", "-o", str(out), "-q"])
        assert done.returncode == 0, done.stderr
        sidecars[precision] = json.loads((out / f"yolov8n_{precision}.json").read_text())
    return sidecars, out


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_builds_with_four_outputs(built, precision):
    sidecars, out = built
    sidecar = sidecars[precision]
    assert [[o["name"], o["dtype"], o["shape"]] for o in sidecar["outputs"]] == [list(o) for o in OUTPUTS]
    assert sidecar["precision"]["built"] == precision
    assert any("post-processing appended: NMS(head='yolo'" in note for note in sidecar["notes"])
    assert (out / f"yolov8n_{precision}.engine").stat().st_size > 0
    settings = {**NMS("yolo").as_dict(), "rounds": NMS_ROUNDS, "outputs": list(NMS_OUTPUTS)}
    assert sidecar["graph_edits"] == {"nms": settings}  # no cut: no outputs key
    assert sidecar["builder"]["config"]["postprocess"] == NMS("yolo").as_dict()  # what a rebuild line reads


def test_inspect_shows_the_nms(built):
    _, out = built
    done = run(["inspect", str(out / "yolov8n_fp16.json")])
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "NMS yolo: score > 0.25, IoU > 0.45, per class, top 1000 candidates, 100 detections kept" in text
    assert "detection_boxes" in text and "detection_classes" in text


def test_fp16_keeps_the_nms_in_fp32(built):
    sidecars, out = built
    graph = onnx.load(out / "yolov8n_fp16.onnx").graph
    nms_nodes = [n.name for n in graph.node if n.name.startswith(NMS_PREFIX)]
    kept = sidecars["fp16"]["precision"]["fp32_nodes"]
    assert len(nms_nodes) > 100 and all("detection post-processing (NMS)" in kept[name] for name in nms_nodes)
    fp16_inputs = {i for n in graph.node if n.name.startswith(NMS_PREFIX) for i in n.input}
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.output]}
    assert not [name for name in fp16_inputs if types.get(name) == onnx.TensorProto.FLOAT16]
    decoding = [name for name, why in kept.items() if why.startswith("box decoding before the NMS")]
    ops = sorted(n.op_type for n in graph.node if n.name in decoding)  # DFL's distances to corners, the class sigmoid
    assert ops.count("Sigmoid") == 1 and ops.count("Sub") == 2 and ops.count("Add") == 2 and "Conv" not in ops


def test_fp32_graph_detections_equal_greedy(built):
    _, out = built
    images = np.load(yolo_file("photos.npz"))["images"].astype(np.float32) / 255
    raw_model, nms_model = session(yolo_file("yolov8n.onnx")), session(out / "yolov8n_fp32.onnx")
    raw = np.concatenate([raw_model.run(None, {"images": x[None]})[0] for x in images]).transpose(0, 2, 1)
    runs = [nms_model.run(list(NMS_OUTPUTS), {"images": x[None]}) for x in images]
    outputs = [np.concatenate([r[i] for r in runs]) for i in range(4)]
    counts = assert_same_detections(outputs, xywh_to_xyxy(raw[..., :4]), raw[..., 4:], NMS("yolo"))
    assert max(counts) == 100 and min(counts) < 100


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` (N, 4) with every box of ``b`` (M, 4), x1 y1 x2 y2."""
    lo, hi = np.maximum(a[:, None, :2], b[None, :, :2]), np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
    area = lambda box: np.prod(box[:, 2:] - box[:, :2], axis=-1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def test_fp16_detections_agree_with_fp32(built):
    """Issue 37: the FP16 graph's detections match FP32's: ≥ 99 % of FP32's boxes have an FP16 box of the same class
    with IoU ≥ 0.9. Both graphs the engines were built from, in ONNX Runtime (which computes some FP16 nodes in FP32
    on the CPU; no engine runs here). Judged on the photos where FP32 keeps fewer than ``max_detections``: on the
    others this random-weight head scores hundreds of boxes at 0.99-1.0, and which of those tied boxes fill the
    100 places is arbitrary in any precision (4 photos; 19 of their 400 boxes differ, all at 0.7-1.0)."""
    _, out = built
    images = np.load(yolo_file("photos.npz"))["images"].astype(np.float32) / 255
    runs = {p: session(out / f"yolov8n_{p}.onnx") for p in ("fp32", "fp16")}
    matched = total = 0
    for x in images:
        (n32, boxes32, _, classes32), (n16, boxes16, _, classes16) = (
            [o[0] for o in runs[p].run(list(NMS_OUTPUTS), {"images": x[None]})] for p in ("fp32", "fp16"))
        a, b = boxes32[: int(n32[0])], boxes16[: int(n16[0])]
        if len(a) == NMS("yolo").max_detections:
            continue
        if len(a) and len(b):
            same = (_iou(a, b) >= 0.9) & (classes32[: len(a), None] == classes16[None, : len(b)])
            matched += int(same.any(axis=1).sum())
        total += len(a)
    assert total > 300 and matched >= 0.99 * total, (matched, total)


def test_reproduce_line_appends_the_nms_to_the_source_file(built):
    """debug precision's line rebuilds from the user's file, so it names the NMS (the settings the sidecar's
    builder.config records, defaults left out); the reference ONNX holds the NMS already, so a line from it must not."""
    from trtforge.debug.bisect import BisectResult, reproduce_command

    _, out = built
    result = BisectResult(precision="fp16", metric="rel_l2", target=0.01, kept=(), search_value=0.0,
                          held_out_value=0.0, baseline=0.0, candidates=0, evaluations=0, order="", reached=True,
                          build_flags="--precision fp16")
    sidecar = json.loads((out / "yolov8n_fp16.json").read_text())
    argv = shlex.split(reproduce_command(out / "yolov8n_fp16.json", result))
    assert argv[2] == str(yolo_file("yolov8n.onnx")) and argv[argv.index("--nms") + 1] == "yolo"
    assert "--score-threshold" not in argv  # the default
    moved = out / "elsewhere"
    moved.mkdir(exist_ok=True)
    for name in ("yolov8n_fp16.engine", "yolov8n_fp16.onnx", "yolov8n_reference_fp32.onnx"):
        (moved / name).write_bytes((out / name).read_bytes())
    nms = {**sidecar["builder"]["config"]["postprocess"], "score_threshold": 0.3}
    for original in (sidecar["source"]["original"], str(moved / "gone.onnx")):
        (moved / "yolov8n_fp16.json").write_text(json.dumps({
            **sidecar, "source": {**sidecar["source"], "original": original},
            "builder": {**sidecar["builder"], "config": {**sidecar["builder"]["config"], "postprocess": nms}}}))
        argv = shlex.split(reproduce_command(moved / "yolov8n_fp16.json", result))
        if original == sidecar["source"]["original"]:
            assert argv[argv.index("--score-threshold") + 1] == "0.3"
    assert argv[2].endswith("yolov8n_reference_fp32.onnx") and "--nms" not in argv  # the file gone: the reference


def test_speedup_fp16_baseline_builds_from_the_reference_without_a_second_nms(built, tmp_path):
    """debug speedup's FP16 baseline is built from the reference ONNX, which holds the NMS already: the recorded
    postprocess is not applied again (it was refused as a head that does not match 'yolo')."""
    from trtforge.core.sidecar import read_sidecar
    from trtforge.debug.speedup import build_fp16

    _, out = built
    sidecar = json.loads(build_fp16(read_sidecar(out / "yolov8n_fp32.json"), tmp_path).read_text())
    assert [o["name"] for o in sidecar["outputs"]] == list(NMS_OUTPUTS) and sidecar["precision"]["built"] == "fp16"


@pytest.mark.parametrize(("flags", "message"), [
    (["--nms", "yolov5"], "do not match head layout 'yolov5'"),
    (["--nms", "boxes-scores"], "boxes-scores reads two outputs"),
    (["--nms", "yolo", "--iou-threshold", "1.5"], r"--iou-threshold 1.5: give a number in (0, 1)"),
    (["--nms", "yolo", "--score-threshold", "0"], r"--score-threshold 0.0: give a number in (0, 1)"),
    (["--nms", "yolo", "--max-detections", "300", "--nms-candidates", "200"], "--max-detections 300 is above"),
    (["--score-threshold", "0.3"], "--score-threshold set(s) the NMS that --nms HEAD appends"),
    (["--outputs", "nope"], "--outputs 'nope' is no tensor of the graph"),
    (["--outputs", "output0,output0"], "--outputs names 'output0' more than once"),
    (["--nms", "yolo", "--path", "direct"], "--outputs and --nms edit the ONNX graph; drop --path direct"),
])
def test_bad_input_is_one_line_before_any_build(tmp_path, flags, message):
    done = run(["build", str(yolo_file("yolov8n.onnx")), *flags, "-o", str(tmp_path), "-q", "--no-cache"])
    assert done.returncode in (1, 2), done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert not list(tmp_path.iterdir())


def test_bad_head_in_python_is_one_line_before_any_build(tmp_path):
    """The same refusal from trtforge.compile, worded for Python (outputs=, not --outputs), nothing written."""
    import trtforge
    from trtforge.core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="do not match head layout 'yolov5'") as caught:
        trtforge.compile(yolo_file("yolov8n.onnx"), postprocess=NMS("yolov5"), output_dir=tmp_path / "out",
                         cache=False, progress=False)
    assert "\n" not in str(caught.value) and "outputs=[...]" in str(caught.value) and "--" not in str(caught.value)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize(("precision", "flags", "stem"), [
    ("fp8", ["--target", "sm89"], "yolov8n_fp8_sm89"),
    ("int8", ["--allow-unaccelerated"], "yolov8n_int8"),  # W8A8 INT8: no TensorRT-RTX default target speeds it up
])
def test_quantized_build_measures_the_head_and_keeps_the_nms_fp32(tmp_path, precision, flags, stem):
    """Quantization calibrates and measures the model's own head (detections that change order are no error
    measure: FP8 read 0.52 relative L2 when it measured them), and the NMS joins after it, in FP32, with the box
    decoding that feeds it; the sidecar records each of those nodes with its reason."""
    calib = tmp_path / "calib.npy"
    np.save(calib, np.load(yolo_file("photos.npz"))["images"][:10].astype(np.float32) / 255)
    done = run(["build", str(yolo_file("yolov8n.onnx")), "--nms", "yolo", "--precision", precision, *flags,
                "--calib", str(calib), "--no-bias-correction", "--opt-level", "0", "-o", str(tmp_path / "out"), "-q"])
    assert done.returncode == 0, done.stderr
    sidecar = json.loads((tmp_path / "out" / f"{stem}.json").read_text())
    assert [o["name"] for o in sidecar["outputs"]] == list(NMS_OUTPUTS) and sidecar["precision"]["built"] == precision
    assert sidecar["quantization"]["measured"]["rel_l2_mean"] < 0.1 and sidecar["quantization"]["error_budget"]["holds"]
    graph = onnx.load(tmp_path / "out" / f"{stem}.onnx").graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.output]}
    nms = [n for n in graph.node if n.name.startswith(NMS_PREFIX)]
    assert len(nms) > 100 and not [i for n in nms for i in n.input if types.get(i) == onnx.TensorProto.FLOAT16]
    assert not [n for n in nms if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    kept = sidecar["precision"]["fp32_nodes"]
    assert all("detection post-processing (NMS)" in kept.get(n.name, "") for n in nms)
    decoding = [n for n in graph.node if kept.get(n.name, "").startswith("box decoding before the NMS")]
    assert sorted(n.op_type for n in decoding).count("Sigmoid") == 1 and len(decoding) >= 5  # DFL corners, sigmoid
    assert not [i for n in decoding for i in n.output if types.get(i) == onnx.TensorProto.FLOAT16]


def test_refit_of_an_nms_build_replays_the_nms(built, tmp_path):
    """``refit`` reads a new ONNX of the raw model, appends the NMS the sidecar records (its constants take the
    names and values the engine holds) and hands TensorRT the new weights; a sidecar that does not record the NMS
    is refused in one line. The refit runs through FakeTrtRefitter: no engine deserializes here."""
    from onnx import numpy_helper
    from refit_double import FakeTrtRefitter, fake_trt_refit_bindings

    from trtforge.core.sidecar import read_sidecar, write_sidecar
    from trtforge.refit import refit_engine

    _, out = built
    for name in ("yolov8n_fp16.engine", "yolov8n_fp16.onnx", "yolov8n_reference_fp32.onnx", "yolov8n_fp16.json"):
        (tmp_path / name).write_bytes((out / name).read_bytes())
    sidecar = read_sidecar(tmp_path / "yolov8n_fp16.json")
    write_sidecar(sidecar.path, replace(sidecar, builder=replace(sidecar.builder, refittable=True)))
    model = onnx.load(yolo_file("yolov8n.onnx"))
    weight = next(i for i in model.graph.initializer if i.name.endswith("conv.weight"))
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))
    onnx.save(model, tmp_path / "finetuned.onnx")
    engine_graph = {i.name: numpy_helper.to_array(i) for i in onnx.load(tmp_path / "yolov8n_fp16.onnx").graph.initializer
                    if numpy_helper.to_array(i).dtype.kind == "f"}
    bindings = fake_trt_refit_bindings(engine_graph)
    refit_engine(tmp_path / "yolov8n_fp16.engine", tmp_path / "finetuned.onnx", bindings=bindings)
    received = FakeTrtRefitter.last.pending
    assert sorted(received) == sorted(engine_graph)
    nms = [name for name in engine_graph if name.startswith(NMS_PREFIX)]
    assert len(nms) > 20 and all(np.array_equal(received[n].ravel(), engine_graph[n].ravel()) for n in nms)
    np.testing.assert_allclose(received[weight.name].astype(np.float32), engine_graph[weight.name] * 1.5, rtol=2e-3)
    read_sidecar(tmp_path / "yolov8n_fp16.json").verify_engine()

    refitted = read_sidecar(tmp_path / "yolov8n_fp16.json")
    write_sidecar(refitted.path, replace(refitted, graph_edits=None))  # as an older trtforge wrote it
    done = run(["refit", str(tmp_path / "yolov8n_fp16.engine"), "--weights", str(tmp_path / "finetuned.onnx")])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: yolov8n_fp16.engine holds an appended NMS that its sidecar does not record")
