"""What libtensorrt_rtx prints past TensorRT's logger (Myelin's FP16 "precision-lose casting" warning, on
stdout) reaches trtforge's debug log, never the terminal; Python's own output still reaches the terminal."""

from __future__ import annotations

import logging
import os

import onnx
from onnx import TensorProto, helper

import trtforge
from trtforge.builder.native_output import native_output_to_log

LOGGER = "trtforge.builder.native_output"


def test_a_real_fp16_build_prints_nothing_raw_and_logs_the_cast_warning(tmp_path, capfd, caplog):
    # Clip without bounds: TensorRT clamps at FP32's limits, which Myelin casts to FP16 with a printed warning.
    graph = helper.make_graph([helper.make_node("Clip", ["x", "", ""], ["y"], name="clip")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    path = tmp_path / "clip.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        trtforge.compile(str(path), precision="fp16", output_dir=tmp_path / "o", progress=False, cache=False)
    out, err = capfd.readouterr()
    assert "precision-lose" not in out + err, (out, err)
    logged = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert any("payload type requires precision-lose casting" in m for m in logged), logged


def test_native_writes_are_captured_and_python_writes_pass_through(capfd, caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER), native_output_to_log() as lines:
        os.write(1, b"native out\n")
        os.write(2, b"native err\n")
        print("python out")
    out, err = capfd.readouterr()
    assert sorted(lines) == ["native err", "native out"]
    assert "native" not in out + err and "python out" in out
    assert sorted(r.getMessage() for r in caplog.records if r.name == LOGGER) == [
        "TensorRT printed: native err", "TensorRT printed: native out"]


def test_concurrent_blocks_share_one_capture_and_restore_the_descriptors(capfd):
    import threading

    entered, release = threading.Barrier(2), threading.Event()

    def build(text: bytes) -> None:
        with native_output_to_log():
            entered.wait()
            os.write(2, text)
            release.wait()

    threads = [threading.Thread(target=build, args=(t,)) for t in (b"first\n", b"second\n")]
    for thread in threads:
        thread.start()
    release.set()
    for thread in threads:
        thread.join()
    os.write(2, b"after\n")
    _, err = capfd.readouterr()
    assert err == "after\n", err
