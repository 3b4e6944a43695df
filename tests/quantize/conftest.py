"""Fixtures of the quantizer's tests: a tiny BERT encoder (random weights, two inputs of token ids)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_bert():
    """A 2-layer BERT from a tiny config (vocabulary 64, hidden 32), its output the last hidden state."""
    from tests.matrix.matrix_models import minilm

    return minilm()


@pytest.fixture(scope="session")
def tiny_bert_onnx(tiny_bert, tmp_path_factory) -> Path:
    """``tiny_bert`` exported by TorchScript (opset 17), batch and sequence dynamic: inputs input_ids and
    attention_mask (int64), output last_hidden_state."""
    path = tmp_path_factory.mktemp("tiny_bert") / "bert.onnx"
    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    axes = {0: "batch", 1: "seq"}
    torch.onnx.export(tiny_bert, (ids, torch.ones_like(ids)), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
    return path
