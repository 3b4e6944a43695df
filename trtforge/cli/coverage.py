"""``trtforge coverage``: which ops of a PyTorch model the direct path converts, refuses (and why), cannot
convert, or keeps in PyTorch (``--torch-executed-op``), and the blocks partitioning would make: engines, or
(below ``--min-block-size``) PyTorch; nothing is built.

``--min-block-size`` and ``--torch-executed-op`` are ``trtforge build``'s own options (``CompileConfig``'s
fields, read from their metadata), checked by the same config.

Example:
    $ trtforge coverage mypkg.models:make_net --input-shape 2x3x224x224 --batch 1:8:32
    $ trtforge coverage mypkg.models:make_net --input-shape 2x3x224x224 --min-block-size 5 \\
        --torch-executed-op aten.softmax.int
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import app, console, guarded
from trtforge.cli.build import BUILD_PARAMETERS
from trtforge.cli.models import SHAPE_HELP, model_from_cli
from trtforge.core.batch import parse_batch
from trtforge.core.config import FLOAT_PRECISIONS, CompileConfig, option_spelling
from trtforge.core.errors import InvalidArgument

#: ``trtforge build``'s partitioning options, taken as they are declared on ``CompileConfig``.
PARTITION_PARAMETERS = tuple(p for p in BUILD_PARAMETERS if p.field in ("min_block_size", "torch_executed_ops"))


def coverage(model: str, input_shape: list[str] | None = None, batch: str = "1", precision: str = "fp32",
             **values: Any) -> None:
    """Print the direct path's op table (converted / folded / refused with reason / unsupported /
    torch-executed) and the blocks partitioning would make (engine, or PyTorch below --min-block-size)."""
    if precision not in FLOAT_PRECISIONS:
        raise InvalidArgument(f"--precision {precision}: the direct path converts at {', '.join(FLOAT_PRECISIONS)}")
    config = CompileConfig(path="direct", precision=precision, progress=False,  # bad values: one line, before torch
                           **{p.field: p.to_field(values[p.name]) for p in PARTITION_PARAMETERS})
    profiles = parse_batch(batch)
    module, inputs = model_from_cli(model, input_shape)
    from trtforge.convert.api import export_inputs
    from trtforge.convert.coverage import coverage as coverage_of

    inputs, export_batch = export_inputs(inputs, profiles)
    report = coverage_of(module, inputs, batch=export_batch, min_block_size=config.block_size, precision=precision,
                         torch_executed_ops=config.torch_executed_ops)
    table = Table(title=f"direct-path coverage of {escape(model)}")
    for column in ("op", "status", "count / reason"):
        table.add_column(column)
    for op, status, detail in report.rows():
        table.add_row(escape(op), status, escape(detail))
    console.print(table)
    console.print(f"coverage {report.fraction:.1%}; {len(report.partitions)} engine partition(s)")
    console.print(blocks_table(report, config))
    console.print(in_pytorch_line(report, config))


def blocks_table(report: Any, config: CompileConfig) -> Table:
    """The blocks partitioning would make, in graph order: compute ops, first … last node, engine or PyTorch."""
    size = option_spelling("min_block_size", str(config.block_size))
    table = Table(title=f"partitioning at {escape(size)}")
    for column in ("block", "compute ops", "nodes", "becomes"):
        table.add_column(column)
    for block, (name, compute, nodes, _) in zip(report.blocks, report.block_rows(), strict=True):
        becomes = "[green]engine[/]" if block.engine else f"PyTorch ({block.compute} < {config.block_size})"
        table.add_row(name, compute, escape(nodes), becomes)
    return table


def in_pytorch_line(report: Any, config: CompileConfig) -> str:
    """What runs in PyTorch and why: unsupported or refused ops, the forced ones, the blocks too small."""
    size = option_spelling("min_block_size", str(config.block_size))
    groups = [("unsupported", [f"{op} ×{n}" for op, n in sorted(report.unsupported.items())]),
              ("refused", sorted(report.refused)),
              (f"forced by {option_spelling('torch_executed_ops', '')}",
               [f"{op} ×{n}" for op, n in sorted(report.forced.items())]),
              (f"blocks below {size}", [f"{b.name} ({b.compute} compute ops)" for b in report.fallback])]
    said = [f"{why}: {', '.join(items)}" for why, items in groups if items]
    line = "in PyTorch: " + ("; ".join(said) if said else "nothing")
    if not config.partitions:
        line += (f"\nwithout {option_spelling('min_block_size', 'N')} or "
                 f"{option_spelling('torch_executed_ops', 'OP')}, `trtforge build --path direct` converts the whole "
                 "module and refuses it while any op is unsupported or refused (blocks shown at the default size)")
    return escape(line)


def _signature() -> inspect.Signature:
    """The model, its shapes, the batch, the precision, and ``trtforge build``'s partitioning options."""
    own = [
        inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[
            str, typer.Argument(help="a PyTorch model factory package.module:function")]),
        inspect.Parameter("input_shape", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=Annotated[list[str] | None, typer.Option(help=SHAPE_HELP)]),
        inspect.Parameter("batch", inspect.Parameter.KEYWORD_ONLY, default="1", annotation=Annotated[str, typer.Option(
            help="N, min:opt:max, or several: 1:1:1,1:8:32 (dim 0 of every input)")]),
        inspect.Parameter("precision", inspect.Parameter.KEYWORD_ONLY, default="fp32", annotation=Annotated[
            str, typer.Option(help=f"the precision the converters judge: {' | '.join(FLOAT_PRECISIONS)}")]),
    ]
    return inspect.Signature([*own, *(p.signature() for p in PARTITION_PARAMETERS)], return_annotation=None)


coverage_command = guarded(coverage)
coverage_command.__signature__ = _signature()  # type: ignore[attr-defined]
app.command("coverage")(coverage_command)
