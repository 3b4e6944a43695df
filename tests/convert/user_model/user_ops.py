"""A model with an op trtforge has no converter for, and the user's converter for it, registered through the
top-level ``trtforge.converter`` (issue 36: one front door)."""
import os

import torch

import trtforge


@torch.library.custom_op("userlib::scale2", mutates_args=())
def scale2(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@scale2.register_fake
def _(x):
    return torch.empty_like(x)


if os.environ.get("WITH_CONVERTER") == "1":
    @trtforge.converter("userlib.scale2.default")
    def convert_scale2(ctx, node, args):
        x = ctx.tensor(args[0])
        return ctx.net.elementwise(x, ctx.tensor(2.0, like=x), "PROD")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(scale2(self.fc(x)))


def make():
    torch.manual_seed(0)
    return Net().eval()
