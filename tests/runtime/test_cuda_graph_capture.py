"""A model a CUDA graph cannot capture is refused in one line that names the routes that run it, and the zoo's
MiniLM encoder makes no tensor from host data in its forward (what made the H100 tune of issue 38 crash:
transformers' BERT mask helper copies a Python number to the GPU on every call, which a capture forbids).

The capture runs through ``tests/doubles/cuda_double.py`` (no GPU here); the model below does what torch refuses
during a capture, a copy from pageable host memory, and raises torch's own message then."""

from __future__ import annotations

import pytest
import torch
from cuda_double import FakeCudaDevices
from torch.utils._python_dispatch import TorchDispatchMode

from trtforge.core.errors import Unsupported
from trtforge.runtime.cuda_graph import capture

#: torch's message for a copy from pageable host memory inside a capture (torch 2.11 on the H100, 2026-12-06).
TORCH_HOST_COPY = ("Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is "
                   "pinned. Please use tensor.pin_memory() or allocate the tensor with pin_memory=True.")


class HostCopyingModel:
    """Copies a Python number to the device on every call, as transformers' ``eager_mask`` does: fine while
    warming up, refused while ``devices`` captures."""

    def __init__(self, devices: FakeCudaDevices) -> None:
        self.devices, self.calls = devices, 0

    def __call__(self) -> torch.Tensor:
        self.calls += 1
        if self.devices.capturing() is not None:
            raise RuntimeError(TORCH_HOST_COPY)
        return torch.zeros(2)


def test_a_model_that_copies_host_memory_during_capture_is_refused_with_the_routes_that_run_it():
    devices = FakeCudaDevices(1)
    model = HostCopyingModel(devices)
    stream = devices.new_stream(0)
    with pytest.raises(Unsupported) as caught:
        capture(model, torch.device("cuda", 0), warmup=2, stream=stream, devices=devices)
    line = str(caught.value)
    assert model.calls == 3  # two warm-up calls ran, the capture refused the third
    assert "\n" not in line and "cannot be captured in a CUDA graph" in line and "unless the CPU tensor is pinned" in line
    assert "route 'eager' or 'compiled'" in line
    assert isinstance(caught.value.__cause__, RuntimeError) and not devices.graphs


def test_another_error_inside_the_capture_is_not_reworded():
    devices = FakeCudaDevices(1)

    def broken() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="illegal memory access") as caught:
        capture(broken, torch.device("cuda", 0), warmup=0, stream=devices.new_stream(0), devices=devices)
    assert not isinstance(caught.value, Unsupported)


class MadeFromHostData(TorchDispatchMode):
    """Every op that makes a tensor from a Python number or list (on a GPU: a copy from pageable host memory)."""

    OPS = ("aten.scalar_tensor", "aten.lift_fresh", "aten.lift_fresh_copy")

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func).startswith(self.OPS):
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_the_zoo_minilm_forward_makes_no_tensor_from_host_data_and_equals_berts_own_mask(minilm):
    model, tokenize = minilm
    batch = tokenize(["a photo of a cat", "espresso with milk, and a longer sentence than the others", "x"], seq_len=16)
    assert int(batch["attention_mask"].sum()) < batch["attention_mask"].numel()  # padding in the batch
    with torch.no_grad(), MadeFromHostData() as ours:
        got = model(**batch)
    with torch.no_grad(), MadeFromHostData() as berts:  # BERT given the 2-D mask builds its own (the reference)
        hidden = model.bert(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    want = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    assert ours.seen == [], ours.seen
    assert berts.seen, "the check cannot fail: BERT's own mask helper no longer makes a tensor from a number"
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
