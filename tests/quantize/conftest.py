"""Fixtures of the quantizer's tests: a tiny BERT encoder (random weights, two inputs of token ids)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_bert():
    """A 2-layer BERT from a tiny config (vocabulary 64, hidden 32; random weights), its output the last hidden
    state (the config of the matrix's ``minilm``)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    return LastHiddenState(transformers.BertModel(config)).eval()


class LastHiddenState(torch.nn.Module):
    """A transformers encoder called with (input_ids, attention_mask), returning its last hidden state."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


@pytest.fixture(scope="session")
def tiny_bert_onnx(tiny_bert, tmp_path_factory) -> Path:
    """``tiny_bert`` exported by TorchScript (opset 17), the batch dynamic, 16 tokens: inputs input_ids and
    attention_mask (int64), output last_hidden_state."""
    path = tmp_path_factory.mktemp("tiny_bert") / "bert.onnx"
    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    axes = {0: "batch"}
    torch.onnx.export(tiny_bert, (ids, torch.ones_like(ids)), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
    return path
