"""Tutorial: a model with an op TensorRT lacks (a custom `torch.library` op): see what converts, then
keep that op in PyTorch and build the rest as engines (partitioning on the direct path).

    python examples/missing_op.py

``make_model`` is also a factory for the command line (from the repository root):

    trtforge coverage examples.missing_op:make_model --input-shape 2x3x8x8 --min-block-size 2
"""

import torch
from torch import nn

import trtforge
from trtforge.convert.coverage import coverage
from trtforge.convert.partition import EngineModule, partition
from trtforge.core.errors import UserError


@torch.library.custom_op("tutorial::jiggle", mutates_args=())
def jiggle(x: torch.Tensor) -> torch.Tensor:
    """An op no converter knows (think of a vendor kernel): sin(x) * 2 plus a running sum."""
    return torch.sin(x) * 2 + x.cumsum(-1) * 0.01


@jiggle.register_fake
def _(x):
    return torch.empty_like(x)


class ConvJiggleHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = jiggle(torch.relu(self.bn(self.conv(x))))
        return torch.softmax(self.fc(y.flatten(2).mean(1)), -1)


def make_model() -> ConvJiggleHead:
    """The model, seeded (the factory ``trtforge coverage`` and ``trtforge build --path direct`` take)."""
    torch.manual_seed(0)
    return ConvJiggleHead().eval()


def main() -> None:
    model = make_model()
    x = torch.randn(2, 3, 8, 8)

    # 1. Coverage: every op of the exported graph as converted, folded, refused or unsupported (no build).
    report = coverage(model, (x,), batch=(1, 2, 4), min_block_size=2)
    print(f"unsupported: {report.unsupported}")
    print(f"converted or folded: {report.fraction:.0%} of the ops, {len(report.partitions)} engine partitions")

    # 2. The whole model as one engine cannot work: the direct path refuses in one line, naming the op.
    try:
        trtforge.compile(model, (x,), path="direct", precision="fp32", batch=(1, 2, 4), cache=False,
                         output_dir="trtforge_out/examples")
    except UserError as exc:
        print(f"direct path refused: {'jiggle' in str(exc)}")

    # 3. Partitioning: the supported runs become TensorRT engines, jiggle stays in PyTorch between them.
    module, parts = partition(model, (x,), batch=(1, 2, 4), min_block_size=2)
    engines = [m for m in module.modules() if isinstance(m, EngineModule)]
    print(f"engines: {len(engines)}, jiggle runs in PyTorch between them: {'jiggle' in module.code}")
    # On this CPU the engines run through the reference evaluator of the recorded network; on a GPU pass
    # the TensorRT route as runner.
    for batch in (1, 3):
        inputs = torch.randn(batch, 3, 8, 8, generator=torch.Generator().manual_seed(batch))
        close = torch.allclose(module(inputs), model(inputs), rtol=1e-4, atol=1e-5)
        print(f"batch {batch}: partitioned module matches PyTorch: {close}")


if __name__ == "__main__":
    main()
