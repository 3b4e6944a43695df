"""``trtforge build``: its options are ``CompileConfig``'s (and ``QuantConfig``'s) fields, read from their metadata.

An option is declared once, as a config field; this module turns each field's ``CliFlag`` into a typer
parameter and each parsed value back into the field, so the command and ``trtforge.compile`` cannot drift.

Example:
    $ trtforge build model.onnx --precision int8 --calib images/ --calibrator entropy --batch 1:8:32 -o out/
    $ trtforge build mypkg.models:make_net --path direct --input-shape 2x3x224x224 --batch 1:8:32
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from trtforge.cli.app import app, console, guarded
from trtforge.cli.models import SHAPE_HELP, model_from_cli
from trtforge.core.config import (
    QUANTIZED_REQUESTS,
    CliFlag,
    CompileConfig,
    ConfigError,
    QuantConfig,
    cli_default,
    options_of,
)
from trtforge.core.errors import InvalidArgument
from trtforge.core.postprocess import NMS


@dataclass(frozen=True)
class CliParameter:
    """One ``trtforge build`` parameter and the config field it fills."""

    config: type
    field: str
    flag: CliFlag
    help: str

    @property
    def name(self) -> str:
        return self.flag.name or self.field

    def signature(self) -> inspect.Parameter:
        info = typer.Option(*self.flag.decls, help=self.flag.help or self.help)
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY,
                                 annotation=Annotated[self.flag.type, info],
                                 default=cli_default(self.config, self.field))

    def to_field(self, value: Any) -> Any:
        return self.flag.to_field(value) if self.flag.to_field else value


def cli_parameters(config: type) -> tuple[CliParameter, ...]:
    """The parameters of every field of ``config`` that has a CLI flag, in declaration order."""
    return tuple(CliParameter(config, name, opt.cli, opt.help) for name, opt in options_of(config) if opt.cli)


BUILD_PARAMETERS = cli_parameters(CompileConfig)
QUANT_PARAMETERS = cli_parameters(QuantConfig)
NMS_PARAMETERS = cli_parameters(NMS)

#: The command's own arguments: the model, and the calibration data (data, not an option).
OWN_PARAMETERS = (
    inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[str, typer.Argument(
        help="an .onnx file; with --path direct a PyTorch model factory package.module:function")]),
    inspect.Parameter("calib", inspect.Parameter.KEYWORD_ONLY, default=None,
                      annotation=Annotated[Path | None, typer.Option(
                          help=f"{'/'.join(QUANTIZED_REQUESTS)}: calibration images folder or .npy/.npz "
                          "(optional for int8-wo/int4-wo)")]),
    inspect.Parameter("input_shape", inspect.Parameter.KEYWORD_ONLY, default=None,
                      annotation=Annotated[list[str] | None, typer.Option(help=f"--path direct: {SHAPE_HELP}")]),
    inspect.Parameter("matrix", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Annotated[bool, typer.Option(
        help="one engine per --target, plus one multi-target engine; a table compares their sizes")]),
)


def config_from_cli(values: dict[str, Any]) -> CompileConfig:
    """The ``CompileConfig`` that parsed CLI values describe; the calibration cache goes beside the output
    (none with ``--no-cache``)."""
    fields = {p.field: p.to_field(values[p.name]) for p in BUILD_PARAMETERS}
    quant = {p.field: p.to_field(values[p.name]) for p in QUANT_PARAMETERS}
    # --no-cache: no calibration cache either (nothing beside the engine but its files)
    calib_cache = Path(fields["output_dir"]) / "calib_cache" if fields["cache"] else None
    fields["quant"] = QuantConfig(**quant, cache_dir=calib_cache)
    fields["postprocess"] = nms_from_cli({p.field: p.to_field(values.get(p.name, cli_default(NMS, p.field)))
                                          for p in NMS_PARAMETERS})
    return CompileConfig(**fields)


def nms_from_cli(values: dict[str, Any]) -> NMS | None:
    """``--nms HEAD`` and its options → an ``NMS``; its options without ``--nms`` are refused."""
    if values["head"] is not None:
        return NMS(**values)
    given = [p.flag.decls[0] if p.flag.decls else "--" + p.name.replace("_", "-") for p in NMS_PARAMETERS
             if values[p.field] != cli_default(NMS, p.field)]
    if given:
        raise ConfigError(f"{', '.join(given)} set(s) the NMS that --nms HEAD appends; add --nms yolo (or yolov5, "
                          "boxes-scores), or drop them")
    return None


def build(model: str, calib: Path | None = None, input_shape: list[str] | None = None, matrix: bool = False,
          **values: Any) -> None:
    """Build an engine + sidecar from an ONNX file (or, with --path direct, a PyTorch model factory)."""
    if calib is not None and values["precision"].lower() not in QUANTIZED_REQUESTS:
        raise ConfigError(f"--calib is used only by --precision {'/'.join(QUANTIZED_REQUESTS)} (this build is "
                          f"{values['precision']}); drop --calib, or add --precision int8")
    config = config_from_cli(values)  # bad options are refused before torch and onnx load
    if matrix and config.partitions:
        raise ConfigError("--matrix builds one engine per --target; a partitioned module (--min-block-size, "
                          "--torch-executed-op) is built once: drop --matrix, or those flags")
    if matrix and not config.targets:
        raise ConfigError("--matrix builds one engine per --target; name them, e.g. --target sm80 --target sm86")
    from trtforge.pipeline import build_matrix
    from trtforge.pipeline import compile as compile_model

    if config.path == "direct":
        args: tuple = model_from_cli(model, input_shape)
    elif input_shape:
        raise InvalidArgument("--input-shape is for --path direct (a PyTorch model); an .onnx carries its shapes")
    else:
        args = (Path(model),)
    if matrix:
        arts = build_matrix(*args, config=config, targets=config.targets, calibration_data=calib)
        console.print(matrix_table(arts))
        return
    console.print(built_line(compile_model(*args, config=config, calibration_data=calib)))


def matrix_table(artifacts: Any) -> Any:
    """The build matrix as a table: targets, engine file, size and cache state of each engine."""
    from rich.table import Table

    table = Table(title="build matrix")
    for column in ("targets", "engine", "bytes", "cache"):
        table.add_column(column)
    for art in artifacts:
        hit = (art.sidecar.builder.cache or {}).get("hit")
        table.add_row(",".join(art.sidecar.builder.targets), art.engine_path.name, f"{art.sidecar.engine_size:,}",
                      "hit" if hit else "built")
    return table


def built_line(art: Any) -> str:
    """What one build wrote: ``built`` with its build time, or ``cache hit`` (no build ran)."""
    from trtforge.artifact import PartitionedArtifact

    if isinstance(art, PartitionedArtifact):  # a folder of engine parts and PyTorch parts
        return (f"[green]built[/] a partitioned module: {escape(str(art.folder))} ({len(art.engines)} engine part(s), "
                f"{len(art.cache_hits)} of them from the engine cache; {len(art.pytorch)} part(s) kept in PyTorch)")
    size = f"{art.sidecar.engine_size / 1e6:.1f} MB"
    files = f"{escape(str(art.engine_path))} ({size}) + {escape(art.sidecar_path.name)}"
    if (art.sidecar.builder.cache or {}).get("hit"):
        return f"[green]cache hit[/]: wrote {files}; no build ran"
    return f"[green]built[/] {files} in {art.sidecar.builder.build_seconds or 0:.1f} s"


def _signature() -> inspect.Signature:
    """``model``, the build options, ``--calib`` and the int8 options, as typer reads them."""
    build_params = [p.signature() for p in BUILD_PARAMETERS]
    quant_at = next(i for i, p in enumerate(BUILD_PARAMETERS) if p.field == "optimization_level") + 2
    quant_params = [OWN_PARAMETERS[1], *(p.signature() for p in QUANT_PARAMETERS)]
    nms_params = [p.signature() for p in NMS_PARAMETERS]
    return inspect.Signature([OWN_PARAMETERS[0], *build_params[:quant_at], *quant_params, *build_params[quant_at:],
                              *nms_params, OWN_PARAMETERS[2], OWN_PARAMETERS[3]], return_annotation=None)


build_command = guarded(build)
build_command.__signature__ = _signature()  # type: ignore[attr-defined]
app.command("build")(build_command)
