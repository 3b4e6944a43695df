"""One FP32 rule set for both paths (issue 36): the same module compiled at FP16 through the ONNX path and the direct
path keeps the same op kinds in FP32, with the same sidecar reasons, on models nobody here wrote (transformers ViT,
Swin and ConvNext from tiny configs, random weights), with ``batch=None`` (ViT, Swin) and with an explicit batch (ConvNext, the
cheapest: the rules and the probe do not read the batch). A tiny Swin of one head exports through torch.onnx's
dynamo exporter (two heads fall back to TorchScript: ~6 CPU s), but there the ONNX path's flavour probe, a
single-node TensorRT build that the direct path does not run, refuses one Reshape in FP16; so two heads. The ONNX side is checked against the processed graph
itself: each kept node's op type is the kind its reason names."""

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
        config = T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1], num_heads=[2], window_size=4)
        return _Plain(T.SwinModel(config), "last_hidden_state").eval()
    config = T.ConvNextConfig(num_stages=1, hidden_sizes=[8], depths=[1])  # a detector backbone
    return _Plain(T.ConvNextModel(config), "pooler_output").eval()


def _compile(tmp_path, name: str, path: str, batch):
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    return trtforge.compile(_model(name), (x,), precision="fp16", path=path, batch=batch, optimization_level=0,
                            progress=False, output_dir=tmp_path / path)


@pytest.mark.parametrize(("name", "batch"), [("vit", None), ("swin", None), ("convnext", "1:2:4")])
def test_both_paths_keep_the_same_op_kinds_for_the_same_reasons(tmp_path, name, batch):
    """Also the one batch rule (``core.batch.resolve_batch``): both paths build one profile, ``1:2:2`` from the
    example's batch of 2 when ``batch=None`` (the direct path built ``2:2:2`` before issue 36), the asked one else."""
    art = _compile(tmp_path, name, "onnx", batch)
    onnx_sc, direct_sc = read_sidecar(art.sidecar_path), read_sidecar(_compile(tmp_path, name, "direct", batch).sidecar_path)
    onnx_kept, direct_kept = dict(onnx_sc.precision.fp32_nodes), dict(direct_sc.precision.fp32_nodes)
    assert sorted(onnx_kept.values()) == sorted(direct_kept.values())  # each kind kept as often, for one reason
    assert onnx_sc.profiles == direct_sc.profiles  # and the one batch rule gives one profile
    expected = (1, 2, 2) if batch is None else (1, 2, 4)
    assert {(r["min"][0], r["opt"][0], r["max"][0]) for p in direct_sc.profiles for r in p.values()} == {expected}
    types = {node.name: node.op_type for node in onnx.load(art.onnx_path, load_external_data=False).graph.node}
    assert {why.split(":")[0] for why in onnx_kept.values()} == {types[node] for node in onnx_kept}
    assert any(why.startswith("LayerNormalization: normalisation") for why in direct_kept.values())


class _Rules(torch.nn.Module):
    """One op for each FP16 rule the models above do not reach, and two the range probe keeps."""

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)  # a hand-written normalisation
        tiny = y * 1e-30  # a constant FP16 flushes to 0
        probed = torch.softmax(x * 100, -1) + (y * 3e4).sum(-1, keepdim=True)  # the range probe: softmax input, |x|
        return rms + x / y + torch.floor(x / 3.7) + torch.fmod(x, 3.7) + tiny + probed, x.prod(-1)


def test_both_adapters_keep_the_same_kinds_on_every_fp16_rule(tmp_path):
    """The rule set's two adapters on one module, no build: the float pass on its ONNX export and the direct
    path's lowering pass on its FX graph, then the direct path's FP16 network against PyTorch (~2 CPU s)."""
    from trtforge.capture.export import export_onnx
    from trtforge.convert.api import lower_module
    from trtforge.convert.evaluator import evaluate
    from trtforge.convert.fp32_plan import plan_fp32
    from trtforge.convert.lower import export_program, mark_constants, program_constants
    from trtforge.passes.float16 import infer_types, plan_float
    from trtforge.passes.process import reference_graph
    from trtforge.passes.range_probe import probe

    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 8, generator=generator), 1 + torch.rand(2, 8, generator=generator)
    reference = infer_types(reference_graph(onnx.load(export_onnx(_Rules(), (x, y), tmp_path / "rules.onnx",
                                                                  dynamic_batch=False))))
    keep = probe(reference, [{"x": x.numpy(), "y": y.numpy()}], "float16")
    onnx_kept = plan_float(reference, "float16", keep).fp32_nodes
    program = export_program(_Rules(), (x, y))
    constants = program_constants(program)
    mark_constants(program.graph_module.graph, constants)
    direct_kept = plan_fp32(program.graph_module.graph, constants, "float16", (x, y)).nodes
    assert sorted(onnx_kept.values()) == sorted(direct_kept.values()), (onnx_kept, direct_kept)
    lowered = lower_module(_Rules(), (x, y), precision="fp16")  # the converters cast where the plan says
    assert lowered.fp32_nodes == direct_kept
    for got, want in zip(evaluate(lowered.net.record, {"x": x, "y": y}), _Rules()(x, y), strict=True):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    kinds = {why.split(":")[0] for why in direct_kept.values()}
    assert {"ReduceMean", "Sqrt", "Add", "Div", "Floor", "Mod", "ReduceProd", "Mul"} <= kinds, direct_kept
    probed = [why for why in direct_kept.values() if "range probe" in why]
    assert any(why.startswith("Softmax: range probe: input") for why in probed) and any(
        why.startswith("ReduceSum: range probe: |x|") for why in probed), probed
