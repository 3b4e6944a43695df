"""``trtforge coverage``: which ops of a PyTorch model the direct path converts, refuses (and why) or
cannot convert, and the engine partitions it would make; nothing is built.

Example:
    $ trtforge coverage mypkg.models:make_net --input-shape 2x3x224x224 --batch 1:8:32
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import app, console, guarded
from trtforge.cli.models import SHAPE_HELP, model_from_cli
from trtforge.core.batch import parse_batch
from trtforge.core.config import FLOAT_PRECISIONS
from trtforge.core.errors import InvalidArgument
from trtforge.core.partition_options import DEFAULT_MIN_BLOCK_SIZE


@app.command("coverage")
@guarded
def coverage_command(
    model: Annotated[str, typer.Argument(help="a PyTorch model factory package.module:function")],
    input_shape: Annotated[list[str] | None, typer.Option(help=SHAPE_HELP)] = None,
    batch: Annotated[str, typer.Option(help="N, min:opt:max, or several: 1:1:1,1:8:32 (dim 0 of every input)")] = "1",
    min_block_size: Annotated[int, typer.Option(help="fewest compute ops in an engine partition")
                              ] = DEFAULT_MIN_BLOCK_SIZE,
    precision: Annotated[str, typer.Option(help=f"the precision the converters judge: {' | '.join(FLOAT_PRECISIONS)}")
                         ] = "fp32",
) -> None:
    """Print the direct path's op table (converted / folded / refused with reason / unsupported) and partitions."""
    if precision not in FLOAT_PRECISIONS:
        raise InvalidArgument(f"--precision {precision}: the direct path converts at {', '.join(FLOAT_PRECISIONS)}")
    profiles = parse_batch(batch)
    module, inputs = model_from_cli(model, input_shape)
    from trtforge.convert.api import export_inputs
    from trtforge.convert.coverage import coverage

    inputs, export_batch = export_inputs(inputs, profiles)
    report = coverage(module, inputs, batch=export_batch, min_block_size=min_block_size, precision=precision)
    table = Table(title=f"direct-path coverage of {escape(model)}")
    for column in ("op", "status", "count / reason"):
        table.add_column(column)
    for op, status, detail in report.rows():
        table.add_row(escape(op), status, escape(detail))
    console.print(table)
    console.print(f"coverage {report.fraction:.1%}; {len(report.partitions)} engine partition(s)")
    for index, nodes in enumerate(report.partitions):
        console.print(f"  engine {index}: {len(nodes)} nodes ({escape(nodes[0])} … {escape(nodes[-1])})")
