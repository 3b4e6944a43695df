"""Calibration memory does not grow with the sample count: the observers keep fixed-size state, each
batch's activations are released before the next batch runs, and batches are concatenated one at a time.

(The peak RSS against 16/32/64 samples on real models is a benchmark: bench/calib_memory.py,
docs/benchmarks.md.)
"""

from __future__ import annotations

import tracemalloc
import weakref
from collections.abc import Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtforge.core.config import QuantConfig
from trtforge.passes import graph
from trtforge.passes.qdq import apply_plan
from trtforge.quantize import observers
from trtforge.quantize.calibration import CalibrationSet
from trtforge.quantize.data import batches
from trtforge.quantize.methods import bias_correction
from trtforge.quantize.quantizer import quantize_model

CHANNELS = 8


def conv_relu_conv() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.2, shape).astype(np.float32), name)
             for name, shape in (("w1", (CHANNELS, CHANNELS, 3, 3)), ("b1", (CHANNELS,)),
                                 ("w2", (CHANNELS, CHANNELS, 1, 1)), ("b2", (CHANNELS,)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", CHANNELS, 16, 16])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def samples(count: int) -> list[dict[str, np.ndarray]]:
    data = np.random.default_rng(1).uniform(0, 1, (count, CHANNELS, 16, 16)).astype(np.float32)
    return [{"x": data[i : i + 1]} for i in range(count)]


class WatchedSession:
    """A real ONNX Runtime session that keeps weak references to the arrays its last run returned."""

    def __init__(self, session) -> None:
        self.session = session
        self.last: list[weakref.ref] = []

    def run(self, names, feed):
        outs = self.session.run(names, feed)
        self.last = [weakref.ref(o) for o in outs]
        return outs


def watched(module, monkeypatch) -> list[WatchedSession]:
    """Make ``module``'s sessions ``WatchedSession``s; the list fills as they are made."""
    made: list[WatchedSession] = []

    def make(*args, **kwargs):
        made.append(WatchedSession(graph.ort_session(*args, **kwargs)))
        return made[-1]

    monkeypatch.setattr(module, "ort_session", make)
    return made


def released_between(made: list[WatchedSession], feeds) -> Iterator[dict[str, np.ndarray]]:
    """``feeds``, each handed out only after checking that the previous run's outputs are gone."""
    handed = 0
    for feed in feeds:
        held = [r for r in made[-1].last if r() is not None] if made else []
        assert not held, f"{len(held)} activation arrays of batch {handed - 1} are still held while batch {handed} runs"
        handed += 1
        yield feed
    assert handed > 2


def test_observer_state_does_not_grow_with_the_batches():
    model = conv_relu_conv()
    small = observers.observe(model, ["x", "r1"], batches(samples(16), 4), per_channel=["c1"])
    large = observers.observe(model, ["x", "r1"], batches(samples(64), 4), per_channel=["c1"])
    assert (small.samples, large.samples) == (16, 64)
    assert small.nbytes == large.nbytes == 2 * observers.NUM_BINS * 8 + 16 * 4  # c1: |x|max over its last axis (W)
    assert large.histograms["r1"].counts.sum() == 64 * CHANNELS * 16 * 16  # every value of every sample counted


def test_observe_releases_each_batch_before_the_next_runs(monkeypatch):
    made = watched(observers, monkeypatch)
    stats = observers.observe(conv_relu_conv(), ["x", "r1", "c1"], released_between(made, batches(samples(32), 4)))
    assert stats.samples == 32


def test_bias_correction_releases_each_batch_before_the_next_runs(monkeypatch):
    result = quantize_model(conv_relu_conv(), np.concatenate([s["x"] for s in samples(40)]),
                            QuantConfig(calibrator="max", include=("conv",), bias_correction=False), progress=False)
    made = watched(bias_correction, monkeypatch)
    shifts = bias_correction.measure_shifts(result.fp32, apply_plan(result.fp32, result.plan), [("c1", 1), ("y", 1)],
                                            released_between(made, batches(samples(32), 4)))
    assert set(shifts) == {"c1", "y"} and all(s.shape == (CHANNELS,) for s in shifts.values())


def test_calibration_batches_are_made_one_at_a_time():
    """Reading the batches holds one concatenated batch at a time, not a copy of every sample."""
    one_batch = 8 * CHANNELS * 16 * 16 * 4
    for count in (64, 256):
        data = CalibrationSet(samples(count), [], batch=8)
        tracemalloc.start()
        read = sum(int(b["x"].shape[0]) for b in data.calib_batches)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert read == count and len(data.calib_batches) == count // 8
        assert peak < 2.5 * one_batch, f"{count} samples: {peak} bytes traced while reading, one batch is {one_batch}"
    chained = data.calib_batches + CalibrationSet(samples(12), [], batch=8).calib_batches
    assert [b["x"].shape[0] for b in chained][-3:] == [8, 8, 4]
