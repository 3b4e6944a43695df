"""One FP32 rule set for both paths (issue 36): the same module compiled at FP16 through the ONNX path and the direct
path keeps the same op kinds in FP32, with the same sidecar reasons, on models nobody here wrote (transformers ViT,
Swin and ConvNext from tiny configs, random weights), with ``batch=None`` and with an explicit batch. The ONNX side
is checked against the processed graph itself: each kept node's op type is the kind its reason names."""

from __future__ import annotations

import onnx
import pytest
import torch

import trtforge
from trtforge.core.sidecar import read_sidecar

pytestmark = pytest.mark.needs_trt


class _Plain(torch.nn.Module):
    """A transformers model's one output as a tensor."""

    def __init__(self, model: torch.nn.Module, key: str) -> None:
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[self.key]


def _model(name: str) -> torch.nn.Module:
    import transformers as T

    torch.manual_seed(0)
    if name == "vit":  # attention with a boolean mask: its bias holds float32's min, which FP16 cannot
        config = T.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=64)
        return _Plain(T.ViTModel(config), "last_hidden_state").eval()
    if name == "swin":
        config = T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                              window_size=4)
        return _Plain(T.SwinModel(config), "last_hidden_state").eval()
    config = T.ConvNextConfig(num_stages=1, hidden_sizes=[8], depths=[1])  # a detector backbone
    return _Plain(T.ConvNextModel(config), "pooler_output").eval()


def _kept(tmp_path, name: str, path: str, batch) -> tuple[dict[str, str], object]:
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    art = trtforge.compile(_model(name), (x,), precision="fp16", path=path, batch=batch, optimization_level=0,
                           progress=False, output_dir=tmp_path / path)
    return dict(read_sidecar(art.sidecar_path).precision.fp32_nodes), art


@pytest.mark.parametrize("batch", [None, 2])
@pytest.mark.parametrize("name", ["vit", "swin", "convnext"])
def test_both_paths_keep_the_same_op_kinds_for_the_same_reasons(tmp_path, name, batch):
    onnx_kept, art = _kept(tmp_path, name, "onnx", batch)
    direct_kept, _ = _kept(tmp_path, name, "direct", batch)
    assert sorted(onnx_kept.values()) == sorted(direct_kept.values())  # each kind kept as often, for one reason
    types = {node.name: node.op_type for node in onnx.load(art.onnx_path, load_external_data=False).graph.node}
    assert {why.split(":")[0] for why in onnx_kept.values()} == {types[node] for node in onnx_kept}
    assert any(why.startswith("LayerNormalization: normalisation") for why in direct_kept.values())
