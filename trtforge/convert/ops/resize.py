"""Resize (upsample nearest / nearest-exact / bilinear / bicubic) and grid_sample."""

from __future__ import annotations

from trtforge.convert.context import Context, example
from trtforge.convert.registry import converter


def _static_spatial(node) -> str | None:
    value = example(node.args[0])
    if any(not isinstance(d, int) for d in value.shape[1:]):
        return "resize needs static channel and spatial dims (only the batch may be dynamic)"
    return None


def _scales(x, node, factors) -> tuple[float, ...]:
    """Per-axis scales: the given scale factors (torch maps coordinates with them), else out / in."""
    spatial = x.rank - 2
    if factors is not None and all(f is not None for f in factors):
        return (1.0, 1.0) + tuple(float(f) for f in factors)
    out = node.meta["val"].shape[2:]
    return (1.0, 1.0) + tuple(o / n for o, n in zip(out, x.shape[2:spatial + 2], strict=True))


def _resize(mode: str, coords_of, rounding: str = "FLOOR"):
    def convert(ctx: Context, node, args):
        x = ctx.tensor(args[0])
        name = str(node.target)
        if name.endswith(".vec"):
            factors = args[-1]
        else:
            factors = [a for a in args[-(x.rank - 2):]]
        align = args[2] if mode != "NEAREST" else False
        return ctx.net.resize(x, mode=mode, coords=coords_of(align), rounding=rounding, scales=_scales(x, node, factors))
    return convert


def _linear_coords(align: bool) -> str:
    return "ALIGN_CORNERS" if align else "HALF_PIXEL"


for _d in ("1d", "2d", "3d"):
    converter(f"aten.upsample_nearest{_d}.vec", f"aten.upsample_nearest{_d}.default", validator=_static_spatial)(
        _resize("NEAREST", lambda align: "ASYMMETRIC"))
    converter(f"aten._upsample_nearest_exact{_d}.vec", f"aten._upsample_nearest_exact{_d}.default",
              validator=_static_spatial)(_resize("NEAREST", lambda align: "HALF_PIXEL", "HALF_UP"))
converter("aten.upsample_bilinear2d.vec", "aten.upsample_bilinear2d.default", "aten.upsample_linear1d.vec",
          "aten.upsample_trilinear3d.vec", validator=_static_spatial)(_resize("LINEAR", _linear_coords))
converter("aten.upsample_bicubic2d.vec", "aten.upsample_bicubic2d.default", validator=_static_spatial)(
    _resize("CUBIC", _linear_coords))


def _grid_ok(node) -> str | None:
    mode, padding = node.args[2], node.args[3]
    if mode != 0:
        return "only bilinear grid_sample is converted (nearest/bicubic round differently)"
    if padding not in (0, 1):
        return "padding_mode='reflection' is not converted; use 'zeros' or 'border'"
    return None


@converter("aten.grid_sampler_2d.default", validator=_grid_ok)
def grid_sample(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    grid = ctx.tensor(args[1], dtype=x.dtype)
    return ctx.net.grid_sample(x, grid, mode="LINEAR", align_corners=bool(args[4]),
                               sample_mode="FILL" if args[3] == 0 else "CLAMP")
