"""Inputs TensorRT reads as shape tensors (a Tile's repeats, a Reshape's shape) build with the values
given in the example inputs: set in every optimization profile, recorded in the sidecar, part of the keys.
Real TensorRT-RTX builds."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import trtforge
from trtforge.builder.build import BuildFailedError, ShapeInputError
from trtforge.cache.engine_cache import engine_key
from trtforge.cache.request_key import request_key
from trtforge.core.config import CompileConfig
from trtforge.core.errors import InvalidArgument
from trtforge.core.sidecar import read_sidecar


def _tile(tmp_path) -> str:
    graph = helper.make_graph([helper.make_node("Tile", ["x", "repeats"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("repeats", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    path = tmp_path / "tile.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


FEEDS = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "repeats": np.array([3, 2], np.int64)}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_shape_tensor_input_builds_with_the_example_values_recorded_in_the_sidecar(tmp_path, precision):
    art = trtforge.compile(_tile(tmp_path), FEEDS, precision=precision, output_dir=tmp_path / "o", progress=False,
                           cache=False)
    sidecar = read_sidecar(art.sidecar_path)
    assert [(r.name, r.values) for r in sidecar.shape_inputs] == [("repeats", (3, 2))]
    assert sidecar.to_dict()["shape_inputs"] == [{"name": "repeats", "values": [3, 2]}]
    # The profile sets the tensor's own shape as before; its values travel beside it.
    assert sidecar.profiles[0]["repeats"] == {"min": [2], "opt": [2], "max": [2]}


@pytest.mark.parametrize("feeds", [None, {"x": FEEDS["x"]}])
def test_a_shape_tensor_input_without_values_is_one_line_naming_it_its_op_and_where_to_give_them(tmp_path, feeds):
    with pytest.raises(ShapeInputError) as info:
        trtforge.compile(_tile(tmp_path), feeds, precision="fp32", output_dir=tmp_path / "o", progress=False,
                         cache=False)
    message = str(info.value)
    assert "\n" not in message and "'repeats'" in message and "Tile" in message and "tile.onnx" in message
    assert "example inputs" in message


def test_the_values_are_part_of_the_engine_and_request_keys(tmp_path):
    config = CompileConfig()
    keys = {engine_key(b"graph", config, network_name="m", shape_values=v) for v in ({"s": [3, 2]}, {"s": [2, 3]})}
    assert len(keys) == 2
    assert engine_key(b"graph", config, network_name="m") == engine_key(b"graph", config, network_name="m",
                                                                       shape_values={})
    path = _tile(tmp_path)
    other = {**FEEDS, "repeats": np.array([2, 3], np.int64)}
    assert request_key(path, FEEDS, config) != request_key(path, other, config)  # FP32 too: no range probe


def test_a_failed_build_names_the_shape_values_and_their_reader(tmp_path):
    # TensorRT refuses a negative repeat when it builds (the values reach the builder).
    feeds = {**FEEDS, "repeats": np.array([-1, 2], np.int64)}
    with pytest.raises(BuildFailedError) as info:
        trtforge.compile(_tile(tmp_path), feeds, precision="fp32", output_dir=tmp_path / "o", progress=False,
                         cache=False)
    message = str(info.value)
    assert "\n" not in message and "'repeats' (read by Tile) = [-1, 2]" in message


def test_fp16_example_inputs_that_miss_an_input_are_one_line_before_the_probe(tmp_path):
    with pytest.raises(InvalidArgument) as info:
        trtforge.compile(_tile(tmp_path), {"x": FEEDS["x"]}, precision="fp16", output_dir=tmp_path / "o",
                         progress=False, cache=False)
    message = str(info.value)
    assert "\n" not in message and "['repeats']" in message and "range probe" in message
