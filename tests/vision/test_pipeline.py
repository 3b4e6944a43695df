"""The pipelined batch predictor gives exactly the plain predictor's results, batch by batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trtforge.core.errors import InvalidArgument
from trtforge.core.specs import TensorSpec
from trtforge.runtime.torch_routes import TorchEngine
from trtforge.vision import PipelinedPredictor, Predictor

RECORD = {"resize": [16, 16], "mean": [0.4, 0.5, 0.6], "std": [0.2, 0.25, 0.3]}


class Detector(torch.nn.Module):
    """(N, 3, 16, 16) → 10 queries of 5 logits and 4 boxes, fixed weights."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.logits = torch.nn.Linear(8, 50)
        self.boxes = torch.nn.Linear(8, 40)

    def forward(self, x):
        f = self.conv(x).mean(dim=(2, 3))
        return self.logits(f).view(-1, 10, 5), self.boxes(f).sigmoid().view(-1, 10, 4)


def _predictor(task: str) -> Predictor:
    specs = [TensorSpec("images", "float32", (-1, 3, 16, 16))]
    if task == "detection":
        engine = TorchEngine(Detector(), specs, ["logits", "boxes"], device="cpu")
        return Predictor(engine, RECORD, task="detection", num_detections=5, threshold=0.0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(7))
    model(torch.zeros(1, 3, 16, 16))
    return Predictor(TorchEngine(model, specs, ["logits"], device="cpu"), RECORD, top_k=3)


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        fields = ("class_id", "score") if hasattr(x, "score") else ("xyxy", "confidence", "class_id")
        for name in fields:
            np.testing.assert_allclose(getattr(x, name), getattr(y, name), rtol=1e-6)


@pytest.mark.parametrize("task", ["classification", "detection"])
def test_pipelined_batches_equal_the_plain_predictor(task):
    predictor = _predictor(task)
    rng = np.random.default_rng(0)
    batches = [list(rng.integers(0, 256, (8, 24, 32, 3), dtype=np.uint8)) for _ in range(5)]
    expected = [predictor(b) for b in batches]
    with PipelinedPredictor(predictor) as pipe:
        got = list(pipe.run(batches))
        assert len(got) == 5
        for e, g in zip(expected, got, strict=True):
            _same(e, g)
        tensors = [torch.from_numpy(im) for im in batches[1]]  # tensors as frames; a lone call
        _same(pipe(tensors), expected[1])
        buffer = predictor.frame_buffer(8, 24, 32)  # frames decoded into frame_buffer(): no host copy
        buffer[...] = np.stack(batches[2])
        _same(next(iter(pipe.run([list(buffer)]))), expected[2])
        with pytest.raises(InvalidArgument, match="frames of one size"):
            pipe([batches[0][0], batches[0][0][:8]])
