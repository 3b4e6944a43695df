"""Issue 35 item 4: ``check --inputs`` and ``compare --inputs`` with token ids past the vocabulary crashed inside
ONNX Runtime's Gather. They now refuse the data in one line before running anything, with the same check
calibration makes (``passes.index_ranges``), on a tiny BERT (vocabulary 64)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_in_process import run

import trtforge
from trtforge.core.errors import InvalidArgument
from trtforge.debug.check import check_artifact

pytestmark = pytest.mark.needs_trt
VOCAB = 64


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny BERT exported to ONNX (ids 1x16) and its FP32 artifact."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = transformers.BertModel(config)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids).last_hidden_state

    model = Hidden().eval()
    folder = tmp_path_factory.mktemp("bert")
    onnx_path = folder / "bert.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 16, dtype=torch.int64),), str(onnx_path), dynamo=False,
                          opset_version=17, input_names=["input_ids"], output_names=["hidden"])
    art = trtforge.compile(onnx_path, output_dir=folder / "out", precision="fp32", progress=False)
    return onnx_path, art.sidecar_path


def _ids(path: Path, high: int) -> Path:
    ids = np.random.default_rng(0).integers(0, VOCAB, (2, 16), dtype=np.int64)
    ids[1, 3] = high
    np.savez(path, input_ids=ids)
    return path


def test_check_and_compare_refuse_ids_past_the_vocabulary_in_one_line(bert, tmp_path):
    onnx_path, sidecar = bert
    bad = _ids(tmp_path / "bad.npz", VOCAB + 36)
    for argv in (["check", sidecar, "--route", "onnxruntime", "--inputs", bad],
                 ["compare", onnx_path, f"{sidecar}@onnxruntime", "--inputs", bad]):
        done = run(argv)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2, done.stderr[-3000:]
        assert len(lines) == 1 and lines[0].startswith("error: --inputs input 'input_ids' holds index 100"), lines
        assert f"a table of {VOCAB} rows (valid: -{VOCAB}..{VOCAB - 1})" in lines[0]
    with pytest.raises(InvalidArgument, match=r"inputs= array 'input_ids' holds index 100"):
        check_artifact(sidecar, route="onnxruntime", inputs=bad)


def test_ids_inside_the_vocabulary_still_check(bert, tmp_path):
    _, sidecar = bert
    done = run(["check", sidecar, "--route", "onnxruntime", "--inputs", _ids(tmp_path / "good.npz", VOCAB - 1)])
    assert done.returncode == 0, done.stderr[-3000:]
