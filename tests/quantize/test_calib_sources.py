"""Calibration data as a PyTorch user holds it: torch tensors, tuples of per-input tensors, iterables of those;
one normalisation (``quantize.data.load_calibration``) for every form, and one line for anything else."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

import trtforge
from trtforge.core.config import QuantConfig
from trtforge.passes.graph import fresh_ir, input_specs
from trtforge.quantize.data import CalibrationDataError, data_hash, load_calibration
from trtforge.quantize.quantizer import quantize_model


def _tokens(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 64, (n, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[:, 12:] = 0
    return ids, mask


def test_torch_tensors_give_the_samples_numpy_gives(tiny_bert_onnx):
    """(ids, mask) tensors, a generator of such tuples, and tensor dicts: the same feeds as the numpy dict."""
    specs = input_specs(fresh_ir(onnx.load(tiny_bert_onnx)))
    ids, mask = _tokens(10)
    expected = load_calibration({"input_ids": ids.numpy(), "attention_mask": mask.numpy()}, specs)
    assert len(expected) == 10 and expected[0]["input_ids"].dtype == np.int64
    forms = {
        "tuple of tensors": (ids, mask),
        "list of tensors": [ids, mask],
        "dict of tensors": {"input_ids": ids, "attention_mask": mask},
        "generator of tuples": ((ids[i : i + 2], mask[i : i + 2]) for i in range(0, 10, 2)),
        "list of dicts with grad-free views": [{"input_ids": ids[i : i + 5], "attention_mask": mask[i : i + 5]}
                                               for i in (0, 5)],
        "callable": lambda: (ids, mask),
    }
    for form, source in forms.items():
        assert data_hash(load_calibration(source, specs)) == data_hash(expected), form


def test_one_input_model_takes_a_tensor_and_a_list_of_tensors():
    specs = [("x", np.dtype(np.float32), (None, 4))]
    x = torch.randn(6, 4, requires_grad=True)  # a tensor straight out of a model: needs detaching
    expected = data_hash(load_calibration(x.detach().numpy(), specs))
    assert data_hash(load_calibration(x, specs)) == expected
    assert data_hash(load_calibration([x[:3], x[3:]], specs)) == expected  # a list of batches
    assert data_hash(load_calibration([x[i] for i in range(6)], specs)) == expected  # a list of samples


@pytest.mark.parametrize(("source", "message"), [
    (torch.zeros(4, 16, dtype=torch.long), r"the model has 2 inputs \(input_ids, attention_mask\); pass a dict"),
    ([("a", "b")], r"calibration_data item 0 is a tuple; each item must be a dict \{input_name: array\} or a "
                   r"tuple of 2 arrays"),
    (3.5, r"calibration_data of type float is not supported; pass a directory of images, .*torch tensor"),
])
def test_other_forms_are_refused_in_one_python_line(tiny_bert_onnx, source, message):
    specs = input_specs(fresh_ir(onnx.load(tiny_bert_onnx)))
    with pytest.raises(CalibrationDataError, match=message):
        load_calibration(source, specs)


def test_quantize_a_transformer_from_token_id_tensors(tiny_bert_onnx):
    """Weight-only INT8 calibrated from a tuple of token-id tensors: the same report as from numpy arrays."""
    ids, mask = _tokens(10)
    proto = onnx.load(tiny_bert_onnx)
    config = QuantConfig(bias_correction=False)
    from_torch = quantize_model(proto, (ids, mask), config, progress=False, precision="int8-wo")
    from_numpy = quantize_model(proto, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}, config,
                                progress=False, precision="int8-wo")
    assert from_torch.report["data_sha256"] == from_numpy.report["data_sha256"]
    assert from_torch.report["measured"] == from_numpy.report["measured"]
    assert from_torch.report["samples"] == {"calibration": 8, "held_back": 2}


def test_compile_takes_a_tensor_as_calibration_data(tiny_module, tmp_path):
    """trtforge.compile(module, precision='int8', calibration_data=<torch tensor>): a real TensorRT-RTX build."""
    x = torch.randn(24, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    art = trtforge.compile(tiny_module, (x[:1],), precision="int8", calibration_data=x, allow_unaccelerated=True,
                           output_dir=tmp_path, progress=False)
    assert art.sidecar.quantization.samples == {"calibration": 19, "held_back": 5}
    assert art.engine_path.stat().st_size > 0
