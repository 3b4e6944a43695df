"""Per-converter tests: each op family's network matches PyTorch through the reference evaluator
(FP32, and FP16 for the precision-sensitive families), at a batch other than the export batch, and
builds with TensorRT-RTX."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from convert_check import Fn, check
from torch import nn

from trtforge.convert.converters import all_converters

torch.manual_seed(0)


def img(c=3, h=8, w=8):
    return lambda b: (torch.randn(b, c, h, w),)


def seq(*shape):
    return lambda b: (torch.randn(b, *shape),)


def two(*shape):
    return lambda b: (torch.randn(b, *shape), torch.randn(b, *shape))


def _bn():
    bn = nn.BatchNorm2d(4)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-0.5, 0.5)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), bn, nn.ReLU6())


#: (id, model factory, inputs(batch)); every case also runs with a dynamic batch and builds.
CASES = [
    # conv / pool
    ("conv2d", lambda: nn.Conv2d(3, 8, 3, padding=1), img()),
    ("conv2d_stride_groups", lambda: nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2), img(4, 9, 9)),
    ("conv2d_dilation_nobias", lambda: nn.Conv2d(3, 4, 3, dilation=2, padding=2, bias=False), img()),
    ("conv2d_depthwise_asym", lambda: nn.Conv2d(4, 4, (3, 5), padding=(1, 2), groups=4), img(4)),
    ("conv1d", lambda: nn.Conv1d(3, 4, 3, padding=1), seq(3, 10)),
    ("conv3d", lambda: nn.Conv3d(2, 3, 3, padding=1), lambda b: (torch.randn(b, 2, 4, 5, 5),)),
    ("conv_transpose2d", lambda: nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1), img(4)),
    ("conv_transpose2d_groups", lambda: nn.ConvTranspose2d(4, 4, 2, stride=2, groups=2), img(4)),
    ("max_pool2d", lambda: nn.MaxPool2d(3, 2, 1), img()),
    ("max_pool2d_ceil", lambda: nn.MaxPool2d(3, 2, ceil_mode=True), img(3, 10, 10)),
    ("avg_pool2d", lambda: nn.AvgPool2d(3, 2, 1), img()),
    ("avg_pool2d_exclude_pad", lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), img()),
    ("adaptive_avg_pool_1", lambda: nn.AdaptiveAvgPool2d(1), img()),
    ("adaptive_avg_pool_2", lambda: nn.AdaptiveAvgPool2d(2), img()),
    ("batch_norm_relu6", _bn, img()),
    # matmul
    ("linear_3d", lambda: nn.Linear(8, 5), seq(4, 8)),
    ("linear_2d", lambda: nn.Linear(8, 5), seq(8)),
    ("linear_nobias", lambda: nn.Linear(8, 5, bias=False), seq(3, 8)),
    ("bmm", lambda: Fn(torch.bmm), lambda b: (torch.randn(b, 3, 4), torch.randn(b, 4, 5))),
    ("matmul_4d", lambda: Fn(lambda a, c: a @ c.transpose(-1, -2)), two(2, 3, 4)),
    ("baddbmm", lambda: Fn(lambda c, a, d: torch.baddbmm(c, a, d, beta=0.5, alpha=2.0)),
     lambda b: (torch.randn(b, 3, 5), torch.randn(b, 3, 4), torch.randn(b, 4, 5))),
    # elementwise
    ("arith", lambda: Fn(lambda x, y: (x + 2 * y - x / (y.abs() + 1)) ** 2 - torch.maximum(x, y) * torch.minimum(x, y)),
     two(3, 4)),
    ("scalars", lambda: Fn(lambda x: (3 - x) * 0.5 + x / 4 - 1 + torch.pow(2.0, x)), seq(3, 4)),
    ("float_division_modes", lambda: Fn(lambda x, y: torch.stack([
        torch.div(x, y, rounding_mode="floor"), torch.div(x, y, rounding_mode="trunc"),
        torch.remainder(x, y), torch.fmod(x, y), torch.floor_divide(x, y)])), two(3, 4)),
    ("int_math", lambda: Fn(lambda x: torch.stack([x // 3, x % 3, torch.fmod(x, 3), x * 2 - 1, x.abs()]).float()),
     lambda b: (torch.randint(-9, 9, (b, 5)),)),
    ("compare_logic", lambda: Fn(lambda x, y: torch.stack([
        (x > y) & (x >= 0), (x < y) | (y <= 0), (x == y) ^ (x != 0), ~(x > 0), torch.logical_not(y > 0)])),
     two(3, 4)),
    ("where_clamp", lambda: Fn(lambda x, y: torch.where(x > y, x, y).clamp(-0.5, 0.5) + x.clamp(min=0)
                                + torch.where(y > 0, y, 0.0)), two(3, 4)),
    ("unary_math", lambda: Fn(lambda x: torch.stack([
        x.exp(), (x.abs() + 1).log(), x.abs().sqrt(), (x.abs() + 1).rsqrt(), (x.abs() + 0.5).reciprocal(),
        x.sin(), x.cos(), x.tan(), x.atan(), (x / 4).asin(), (x / 4).acos(), x.erf(), x.ceil(), x.floor(),
        (x * 3).round(), (x * 3).trunc(), x.sign(), (x.abs() + 1).log2(), (x.abs() + 1).log10(), x.log1p().nan_to_num(0),
        x.expm1(), -x, x.sinh(), x.cosh(), x.asinh(), torch.exp2(x)])), seq(3, 4)),
    ("activations", lambda: Fn(lambda x: torch.stack([
        F.relu(x), torch.sigmoid(x), torch.tanh(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x),
        F.hardswish(x), F.hardsigmoid(x), F.leaky_relu(x, 0.1), F.elu(x, 0.7), F.hardtanh(x, -0.3, 0.6),
        F.softplus(x, beta=2.0), F.relu6(x * 4), F.mish(x)])), seq(3, 4)),
    ("isinf_isnan", lambda: Fn(lambda x: torch.stack([torch.isinf(1 / x), torch.isnan(x.log())])),
     lambda b: (torch.tensor([[0.0, -1.0, 2.0]]).repeat(b, 1),)),
    ("cast", lambda: Fn(lambda x: (x * 4).to(torch.int32).to(torch.float32) + x.to(torch.float16).float()), seq(5)),
    # norms
    ("layer_norm", lambda: nn.LayerNorm(8), seq(3, 8)),
    ("layer_norm_2d_noaffine", lambda: nn.LayerNorm([3, 8], elementwise_affine=False), seq(3, 8)),
    ("group_norm", lambda: nn.GroupNorm(2, 4), img(4)),
    # shape
    ("view_flatten_permute", lambda: Fn(lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, 3).flatten(1)), img()),
    ("transpose_unsqueeze_squeeze", lambda: Fn(lambda x: x.transpose(1, 2).unsqueeze(1).squeeze(1).unsqueeze(-1)),
     seq(3, 4)),
    ("cat_split_chunk", lambda: Fn(lambda x, y: torch.cat([*torch.split(x, [1, 3], 2), *y.chunk(2, 2)], 2)),
     two(3, 4)),
    ("slice_select_narrow", lambda: Fn(lambda x: x[:, 1:, ::2] + x[:, :-1, :3] + x[:, 1, 1:4].unsqueeze(1)),
     seq(3, 5)),
    ("index_tensor", lambda: Fn(lambda x: x[:, torch.tensor([2, 0, -1])] + x[:, :3, torch.tensor([1, 0])]),
     seq(4, 2)),
    ("index_select_gather", lambda: Fn(lambda x: torch.index_select(x, 2, torch.tensor([3, 1]))
                                       + torch.gather(x, 2, torch.tensor([[[0, 3]] * 4]).expand(x.shape[0], 4, 2))),
     seq(4, 4)),
    ("embedding", lambda: nn.Embedding(10, 4), lambda b: (torch.randint(0, 10, (b, 6)),)),
    ("expand_repeat", lambda: Fn(lambda x: x[:, :1].expand(-1, 3, 4) + x.repeat(1, 1, 2)[:, :, :4]
                                 + x.new_ones(3, 4)), seq(3, 4)),
    ("pads", lambda: Fn(lambda x: F.pad(x, (1, 2, 0, 1), value=0.5)[:, :, :8, :8] + F.pad(x, (1, 1, 1, 1), "reflect")[
        :, :, 1:9, :8] + F.pad(x, (2, 0, 0, 2), "replicate")[:, :, :8, :8]), img()),
    ("unbind_flip_roll", lambda: Fn(lambda x: torch.stack(x.unbind(1), 2).flip(1) + torch.roll(x.transpose(1, 2),
                                                                                               (1, -2), (1, 2))),
     seq(3, 3)),
    ("like_and_arange", lambda: Fn(lambda x: torch.zeros_like(x) + torch.ones_like(x) * torch.full_like(x, 2.0)
                                   + torch.arange(x.shape[0]).float().reshape(-1, 1, 1)), seq(3, 4)),
    # reductions
    ("reductions", lambda: Fn(lambda x: torch.stack([
        x.sum(-1), x.mean(1).sum(-1, keepdim=True) * 0 + x.mean(-1), x.amax(-1), x.amin(-1),
        x.prod(-1), x.var(-1), x.std(-1, correction=0), x.norm(dim=-1), x.max(-1).values, x.min(-1).values])),
     seq(3, 4)),
    ("softmax", lambda: Fn(lambda x: torch.softmax(x, -1) + torch.log_softmax(x, 1)), seq(3, 4)),
    ("topk_argmax", lambda: Fn(lambda x: (x.topk(2, -1).values, x.topk(2, -1, largest=False).indices,
                                          x.argmax(-1), x.argmin(1, keepdim=True), x.max(-1).indices)),
     lambda b: (torch.randperm(b * 12).float().reshape(b, 3, 4),)),
    ("any_all", lambda: Fn(lambda x: torch.stack([(x > 0).any(-1), (x > -1).all(-1)])), seq(3, 4)),
    # resize / grid sample
    ("nearest_scale", lambda: nn.Upsample(scale_factor=2, mode="nearest"), img(3, 4, 5)),
    ("nearest_size", lambda: nn.Upsample(size=(7, 9), mode="nearest"), img(3, 4, 5)),
    ("nearest_exact", lambda: nn.Upsample(size=(7, 9), mode="nearest-exact"), img(3, 4, 5)),
    ("bilinear", lambda: nn.Upsample(scale_factor=2, mode="bilinear"), img(3, 4, 5)),
    ("bilinear_align_size", lambda: nn.Upsample(size=(7, 3), mode="bilinear", align_corners=True), img(3, 4, 5)),
    ("bicubic", lambda: nn.Upsample(scale_factor=2, mode="bicubic"), img(3, 4, 5)),
    ("grid_sample_zeros", lambda: Fn(lambda x, g: F.grid_sample(x, g, align_corners=False)),
     lambda b: (torch.randn(b, 3, 5, 6), torch.rand(b, 4, 7, 2) * 2.4 - 1.2)),
    ("grid_sample_border_align", lambda: Fn(lambda x, g: F.grid_sample(x, g, padding_mode="border",
                                                                       align_corners=True)),
     lambda b: (torch.randn(b, 3, 5, 6), torch.rand(b, 4, 7, 2) * 2.4 - 1.2)),
    # attention
    ("sdpa", lambda: Fn(F.scaled_dot_product_attention), lambda b: tuple(torch.randn(b, 2, 5, 8) for _ in range(3))),
    ("sdpa_float_mask", lambda: Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
     lambda b: tuple(torch.randn(b, 2, 5, 8) for _ in range(3)) + (torch.randn(b, 1, 5, 5),)),
    ("sdpa_bool_mask_scale", lambda: Fn(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.ones(5, 6, dtype=torch.bool).tril(), scale=0.3)),
     lambda b: (torch.randn(b, 2, 5, 8), torch.randn(b, 2, 6, 8), torch.randn(b, 2, 6, 8))),
    ("sdpa_causal", lambda: Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
     lambda b: tuple(torch.randn(b, 2, 5, 8) for _ in range(3))),
]


@pytest.mark.slow
@pytest.mark.parametrize(("factory", "inputs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_converter_matches_pytorch_and_builds(factory, inputs):
    torch.manual_seed(0)
    check(factory(), inputs)


FP16_CASES = ["conv2d", "conv_transpose2d", "batch_norm_relu6", "linear_3d", "layer_norm", "group_norm", "softmax",
              "reductions", "activations", "bilinear", "sdpa", "sdpa_bool_mask_scale", "max_pool2d", "avg_pool2d"]


@pytest.mark.slow
@pytest.mark.parametrize("case", FP16_CASES)
def test_converter_fp16(case):
    _, factory, inputs = next(c for c in CASES if c[0] == case)
    torch.manual_seed(0)
    lowered = check(factory(), inputs, precision="fp16")
    kinds = {layer.attrs.get("dtype") for layer in lowered.net.record.layers if layer.kind == "cast"}
    assert torch.float16 in kinds, "an FP16 network casts its FP32 input down"


def test_static_batch_conversion():
    check(nn.Conv2d(3, 4, 3), img(), dynamic=False)


def test_registry_is_data_with_families_and_100_plus_aten_ops():
    table = all_converters()
    aten = [t for t in table if t.startswith("aten.")]
    assert len(aten) >= 100, len(aten)
    families = {c.family for c in table.values()}
    assert families == {"conv", "matmul", "elementwise", "norm", "shape", "reduce", "resize", "attention",
                        "detection"}


@pytest.mark.slow
@pytest.mark.parametrize("case", ["conv2d", "linear_3d", "layer_norm", "sdpa"])
def test_converter_bf16(case):
    _, factory, inputs = next(c for c in CASES if c[0] == case)
    torch.manual_seed(0)
    check(factory(), inputs, precision="bf16", tolerance={"rtol": 5e-2, "atol": 5e-2})


def test_bf16_transposed_convolution_is_refused_with_the_fix():
    from trtforge.convert.context import ConversionRefused

    with pytest.raises(ConversionRefused, match="precision='fp16'"):
        check(nn.ConvTranspose2d(4, 3, 3, stride=2), img(4), precision="bf16", build=False)
