"""One ``CompileConfig``: every option of ``trtforge.compile`` and ``trtforge build``, declared once.

Each option is a field of a frozen dataclass. Its metadata (an ``Option``) says what the option
does, whether it changes the engine's bytes (the engine-cache key reads it), and how the CLI spells
it (``trtforge build`` builds its parameters from these fields). Values are checked and normalised
once, when the config is made; what the installed TensorRT and this machine can build is checked by
``trtforge.builder.portability.check_toolchain`` before any expensive work.

Example:
    >>> cfg = CompileConfig(precision="fp16", batch="1:8:32", targets=["sm89", "sm86"])
    >>> cfg.batch, cfg.targets
    ((BatchProfile(min=1, opt=8, max=32),), ('sm86', 'sm89'))
    >>> CompileConfig().batch is None          # the model's own batch (1 where dynamic)
    True
    >>> cfg.with_overrides(optimization_level=5).optimization_level
    5
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from trtforge.core import machine
from trtforge.core.batch import BatchProfile, parse_batch
from trtforge.core.budget import ErrorBudget, check_override, resolve_budget
from trtforge.core.errors import ConfigError, WrongType, spelled  # noqa: F401  (ConfigError: re-exported)
from trtforge.core.options import (  # noqa: F401  (re-exported: the option declarations are this module's API)
    ENGINE,
    FIELD_DEFAULT,
    GRAPH,
    OUTPUT,
    CliFlag,
    Option,
    cli_default,
    option,
    options_of,
)
from trtforge.core.partition_options import DEFAULT_MIN_BLOCK_SIZE, check_min_block_size, op_names
from trtforge.core.postprocess import NMS
from trtforge.core.precisions import (  # noqa: F401  (AUTO_LADDER, PATHS: re-exported)
    AUTO_LADDER,
    FLOAT,
    PATHS,
    RECORDS,
    WEIGHT_ONLY,
)
from trtforge.core.precisions import names as precision_names
from trtforge.core.preprocessing import PreprocessConfig, read_preprocessing_json
from trtforge.core.shapes import (  # noqa: F401  (parse_shapes: re-exported)
    check_batch_and_shapes,
    normalise_shapes,
    parse_shapes,
)

#: Every precision trtforge builds: one record each in ``core.precisions`` (``RECORDS``); these name lists derive
#: from it. Import them, never re-list them.
#: The precisions with no quantization: the whole graph computes in one float type.
FLOAT_PRECISIONS: tuple[str, ...] = precision_names(FLOAT)
#: The float precisions below FP32: the float pass, its range probe and float bisection work on these.
REDUCED_PRECISIONS: tuple[str, ...] = tuple(p.name for p in RECORDS if p.kind == FLOAT and p.compute_dtype)
#: The precisions ``trtforge.quantize`` plans (calibration data, a quantization plan, Q/DQ nodes): W8A8 INT8,
#: FP8 (E4M3) weights and activations, and weight-only INT8/INT4 GEMMs (activations stay FP16).
QUANTIZED_PRECISIONS: tuple[str, ...] = tuple(p.name for p in RECORDS if p.quantized)
#: Quantized precisions that leave activations in the float type (DequantizeLinear-only weights).
WEIGHT_ONLY_PRECISIONS: tuple[str, ...] = precision_names(WEIGHT_ONLY)
PRECISIONS: tuple[str, ...] = precision_names()
#: ``precision="auto"``: per layer the cheapest ``AUTO_LADDER`` rung (cheapest first; one W8A8 type a graph) that
#: every target accelerates, moved up the ladder, then to FP16, where the error budget needs it.
AUTO_PRECISION = "auto"
QUANTIZED_REQUESTS: tuple[str, ...] = QUANTIZED_PRECISIONS + (AUTO_PRECISION,)  # the requests that calibrate
#: Precision → the float dtype the graph computes in (quantized graphs are FP16 outside Q/DQ).
FLOAT_OF_PRECISION: dict[str, str | None] = {p.name: p.compute_dtype for p in RECORDS}
OPTIMIZATION_LEVELS = range(0, 6)
#: What ``layer_precision`` may give a layer: FP32 (kept out of the float pass) or the build's own type.
LAYER_PRECISIONS: tuple[str, ...] = FLOAT_PRECISIONS
CALIBRATORS: tuple[str, ...] = ("max", "percentile", "entropy", "mse")
PLACEMENTS: tuple[str, ...] = ("default", "auto")
ROUNDINGS: tuple[str, ...] = ("nearest", "learned", "gptq")  # quantize.adaround: learned; quantize.gptq
TASKS: tuple[str, ...] = ("auto", "classification", "embedding", "other")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: Longest name: the files add up to ~60 characters (precision, targets, ``.tmp`` prefixes) to it,
#: and most file systems stop at 255.
MAX_NAME_LENGTH = 120

def option_spelling(field_name: str, value: str = "", cls: type | None = None, python: str | None = None) -> str:
    """How the reader of this call writes option ``field_name`` of ``CompileConfig`` (or ``cls``):
    ``--cache-dir DIR`` on the command line, ``cache_dir=DIR`` (or ``python``) in Python (``core.errors.spelled``).

    Example:
        >>> option_spelling("cache_dir", "DIR")
        'cache_dir=DIR'
    """
    flag = next((f.metadata["option"].cli for f in fields(cls or CompileConfig) if f.name == field_name), None)
    long = next((d for d in (flag.decls if flag else ()) if d.startswith("--")), None)
    if long is None:
        long = "--" + ((flag.name if flag and flag.name else None) or field_name).replace("_", "-")
    return spelled(cli=f"{long} {value}".strip(), python=python or f"{field_name}={value}")


def _mib(value: int | None) -> int | None:
    """``--workspace-mb`` → bytes; 0 or less is refused (leave the flag out for no limit)."""
    if value is None:
        return None
    if value <= 0:
        raise ConfigError(f"--workspace-mb {value}: give a positive size in MiB, e.g. 1024, or leave the flag "
                          "out for no limit")
    return value * (1 << 20)


def _tuple(value: Any) -> tuple:
    return tuple(value or ())


def _outputs(value: Any) -> tuple[str, ...] | None:
    """``--outputs a,b --outputs c`` (or ``outputs="a,b"``) → ``("a", "b", "c")``; None stays None."""
    names = _names(value)
    return None if names is None else tuple(n.strip() for name in names for n in name.split(",") if n.strip())


def _names(value: Any) -> tuple[str, ...] | None:
    """None stays None (the default rule); a name or names → a tuple of names."""
    if isinstance(value, str):
        return (value,)
    return None if value is None else tuple(str(v) for v in value)


def parse_layer_precision(specs: list[str] | None) -> tuple[tuple[str, str], ...]:
    """``--layer-precision PATTERN:PRECISION`` (repeatable) → the ``layer_precision`` field.

    Example:
        >>> parse_layer_precision(["^/head/:fp32", "a:b:FP32"])   # the last ':' splits: regexes may hold ':'
        (('^/head/', 'fp32'), ('a:b', 'fp32'))
    """
    return layer_precisions(specs, "--layer-precision")


def layer_precisions(value: Any, what: str = "layer_precision") -> tuple[tuple[str, str], ...]:
    """``{PATTERN: PRECISION}``, ``["PATTERN:PRECISION", ...]`` or ``(PATTERN, PRECISION)`` pairs → pairs,
    checked: each entry well formed, its precision one of ``LAYER_PRECISIONS``, its pattern a regex.

    Example:
        >>> layer_precisions({"^/head/": "FP32"})
        (('^/head/', 'fp32'),)
    """
    cli = what.startswith("--")
    example = "--layer-precision '^/head/:fp32'" if cli else "layer_precision={'^/head/': 'fp32'}"
    if value is not None and not isinstance(value, (Mapping, str, list, tuple)):
        raise WrongType(f"{what} takes {{PATTERN: PRECISION}} or a list of 'PATTERN:PRECISION', not "
                        f"{type(value).__name__}; e.g. {example}")
    entries = value.items() if isinstance(value, Mapping) else (value,) if isinstance(value, str) else value or ()
    pairs = []
    for raw in entries:
        entry = raw.rpartition(":")[::2] if isinstance(raw, str) and ":" in raw else raw
        if isinstance(entry, str) or len(entry) != 2 or not all(isinstance(e, str) and e for e in entry):
            raise ConfigError(f"{what} {raw!r}: write PATTERN:PRECISION (a node regex or op type, then "
                              f"{', '.join(LAYER_PRECISIONS)}), e.g. {example}")
        pattern, precision = entry[0], entry[1].lower()
        if precision not in LAYER_PRECISIONS:
            raise ConfigError(f"{what} '{pattern}:{entry[1]}': a layer can be given "
                              f"{', '.join(LAYER_PRECISIONS)}, not {entry[1]!r}; e.g. {example}"
                              + ("; to keep layers out of a quantized precision use exclude"
                                 if precision in QUANTIZED_PRECISIONS else ""))
        pairs.append((pattern, precision))
    validate_patterns(tuple(p for p, _ in pairs), what)
    return tuple(pairs)


def check_layer_precision(pairs: tuple[tuple[str, str], ...], precision: str) -> None:
    """Refuse a layer type the ``precision`` build cannot give: a graph computes in one float type
    (plus the layers kept in FP32), and INT8 builds keep layers out with ``quant.exclude``.

    Example:
        >>> check_layer_precision((("^/head/", "fp32"), ("conv", "fp16")), "fp16")   # fine
    """
    if pairs and precision in QUANTIZED_REQUESTS:
        raise ConfigError(f"layer_precision {pairs[0][0]}:{pairs[0][1]} is for fp16/bf16 builds; an {precision} build "
                          f"keeps layers out of {precision.upper()} with quant exclude (--exclude PATTERN)")
    for pattern, wanted in pairs:
        if wanted not in ("fp32", precision):
            raise ConfigError(f"layer_precision {pattern}:{wanted} with precision {precision}: a graph computes in "
                              f"one float type; give {pattern}:fp32 to keep those layers in FP32, or build with "
                              f"precision {wanted}")


def check_quant_options(quant: QuantConfig, precision: str) -> None:
    """Refuse a quantization option the precision has no use for (one line, before any work).

    Example: ``check_quant_options(QuantConfig(awq=True), "int4-wo")`` passes; with ``"int8"`` it raises.
    """
    if precision == AUTO_PRECISION and quant.error_budget is None:
        raise ConfigError("precision='auto' (--precision auto) keeps per layer the cheapest precision within an error "
                          "budget: give error_budget= (--error-budget), e.g. 0.1 (relative L2), 0.99 (an embedding's "
                          "cosine) or 0.01 (a classifier's softmax KL)")
    if precision == AUTO_PRECISION and quant.smoothquant is not None:
        raise ConfigError("smoothquant= (--smoothquant) is for one W8A8 precision (int8, fp8), not auto; drop it")
    weight_only = precision in WEIGHT_ONLY_PRECISIONS
    if quant.equalize and (weight_only or precision == AUTO_PRECISION):  # the ONNX path's int8/fp8 flow runs it
        raise ConfigError(f"equalize=True (--equalize) is for one W8A8 precision (int8, fp8), not {precision}: drop it")
    if quant.finetune_seconds is not None and precision != "int8":  # fake quantization of INT8 Q/DQ only
        raise ConfigError(f"finetune_seconds= (--finetune-seconds) fine-tunes INT8 (W8A8) weights, not {precision}: "
                          "drop it, or build with precision int8")
    if quant.awq and not weight_only:
        raise ConfigError(f"awq=True (--awq) scales weights for the weight-only precisions (int8-wo, int4-wo), not "
                          f"{precision}; drop it, or use smoothquant=0.5 (--smoothquant 0.5) with int8/fp8")
    if quant.smoothquant is not None and weight_only:
        raise ConfigError(f"smoothquant= (--smoothquant) moves activation outliers into the weights; {precision} "
                          "keeps activations in FP16. Drop it, or use awq=True (--awq)")
    if quant.calibrator == "entropy" and precision in ("fp8", AUTO_PRECISION):  # bench: ViT top-1 0.0 with fp8
        fix = spelled(cli="--precision fp8 or auto (which may pick FP8) use --calibrator mse (the default) or max",
                      python="precision='fp8' or 'auto' (which may pick FP8) use calibrator='mse' (the default) or 'max'")
        raise ConfigError(spelled(cli="--calibrator entropy", python="calibrator='entropy'") + " fits INT8's 128 "
                          f"uniform levels and clips FP8 activations far too hard; with {fix}")
    integer_weights = tuple(p.name for p in RECORDS if p.weight_dtype == "int8")  # learned: per-channel INT8 grid
    rounds = {"learned": integer_weights, "gptq": WEIGHT_ONLY_PRECISIONS}.get(quant.rounding, (precision,))
    if precision not in rounds:  # learned: per-channel integer weights; GPTQ: weight-only GEMM weights
        raise ConfigError(f"rounding={quant.rounding!r} (--rounding {quant.rounding}) is for {'/'.join(rounds)}, not {precision}: drop it")
    if quant.block_size is not None and not weight_only and precision != AUTO_PRECISION:
        raise ConfigError(f"block_size= (--block-size) is for int8-wo/int4-wo weights; {precision} quantizes "
                          "weights per output channel. Drop it")


def validate_patterns(patterns: tuple[str, ...], what: str) -> None:
    """Refuse an ``exclude``/``include`` pattern that is not a regular expression."""
    for p in patterns:
        try:
            re.compile(p)
        except re.error as exc:
            raise ConfigError(f"{what} pattern {p!r} is not a valid regular expression ({exc}); "
                              "escape special characters, e.g. r'blocks\\.0\\.'") from exc


def validate_name(name: str) -> str:
    """A plain file-name stem for the engine, sidecar and graphs."""
    if not name:
        raise ConfigError("name '' is empty; give a file-name stem such as 'lite0', or leave it out for the model's")
    if "/" in name or "\\" in name:
        raise ConfigError(f"name {name!r} must be a plain file-name stem without a path separator; "
                          f"put the folder in {option_spelling('output_dir', 'DIR')}")
    if len(name) > MAX_NAME_LENGTH:
        raise ConfigError(f"name {name[:20]}… is {len(name)} characters long; file systems allow about 255 per file "
                          f"name and trtforge adds suffixes, so use at most {MAX_NAME_LENGTH}")
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigError(f"name {name!r}: use letters, digits, '.', '_' and '-' (starting with a letter or digit)")
    return name


@dataclass(frozen=True)
class QuantConfig:
    """How to quantize. Defaults: MSE calibrator, guarded bias correction, RF-DETR placement rules, 20 % held back.

    Example:
        >>> QuantConfig(calibrator="percentile", percentile=99.99, smoothquant=0.5, bias_correction=True,
        ...             placement="auto", error_budget=0.005, exclude=(r"_fc",))  # 0.005: a classifier's KL
        >>> QuantConfig(placement="auto", error_budget=ErrorBudget.of(cosine=0.995, rel_l2=0.1))
    """

    calibrator: str = option("mse", help="int8: mse | percentile | entropy | max", affects=GRAPH, cli=CliFlag(str))
    percentile: float = option(99.99, help="percentile calibrator: the percentile kept", affects=GRAPH)
    smoothquant: float | None = option(None, help="int8: SmoothQuant alpha, e.g. 0.5 (off when absent)",
                                       affects=GRAPH, cli=CliFlag(float | None))
    bias_correction: bool = option(True, help="int8: bias correction (kept only when it helps)", affects=GRAPH,
                                   cli=CliFlag(bool))
    placement: str = option("default", help="int8: default (rules) | auto (measured)", affects=GRAPH,
                            cli=CliFlag(str))
    # None: the task's default (budget.TASK_BUDGETS); a float: the limit of the task's metric; an ErrorBudget.
    error_budget: float | ErrorBudget | None = option(
        None, affects=GRAPH, cli=CliFlag(float | None),
        help="auto placement, --precision auto (required there): limit in the task's metric (classifier: softmax "
             "KL, e.g. 0.01; embedding: mean cosine, e.g. 0.99; other: relative L2, e.g. 0.1); default: the task's")
    exclude: tuple[str, ...] = option((), help="int8: keep layers matching this regex/op type in FP16",
                                      affects=GRAPH, cli=CliFlag(list[str] | None, None, to_field=_tuple))
    include: tuple[str, ...] = option((), help="int8: force layers matching this regex/op type to INT8",
                                      affects=GRAPH, cli=CliFlag(list[str] | None, None, to_field=_tuple))
    max_images: int = option(128, help="calibration samples used at most", affects=GRAPH)
    holdout: float = option(0.2, help="share of samples held back for the accuracy report", affects=GRAPH,
                            cli=CliFlag(float, name="holdout", help="int8: share of samples held back, e.g. 0.2"))
    batch_size: int = option(8, help="calibration batch size (when the graph's batch is dynamic)", affects=GRAPH,
                             cli=CliFlag(int, name="calib_batch_size", help="int8: calibration batch size"))
    num_bins: int = option(2048, help="histogram bins of the entropy/percentile/mse calibrators", affects=GRAPH)
    cache_dir: Path | None = option(None, help="calibration cache folder", affects=OUTPUT)
    task: str = option("auto", help="classification | embedding | other: the metrics and default budget",
                       affects=GRAPH)
    block_size: int | None = option(
        None, affects=GRAPH, cli=CliFlag(int | None),
        help="int8-wo/int4-wo: weights per scale along the reduction axis (a power of two >= 16); default: 128 "
             "for int4-wo, one scale per output channel for int8-wo")
    awq: bool = option(False, affects=GRAPH, cli=CliFlag(bool),
                       help="int8-wo/int4-wo: AWQ-lite activation-aware weight scaling (kept only when it helps)")
    rounding: str = option("nearest", help="nearest | learned (int8) | gptq (int4-wo)", affects=GRAPH, cli=CliFlag(str))
    rounding_seconds: float = option(120.0, help="learned rounding: seconds", affects=GRAPH, cli=CliFlag(float))
    equalize: bool = option(False, help="int8/fp8: equalize Conv pairs (kept if it helps)", affects=GRAPH, cli=CliFlag(bool))
    finetune_seconds: float | None = option(None, affects=GRAPH, cli=CliFlag(float | None), help=(
        "int8: quantization-aware fine-tuning on the calibration data, distilled from FP32, for this many seconds "
        "(kept if it helps; off when absent)"))

    def __post_init__(self) -> None:
        def said(name: str) -> str:  # the option and its value as the reader writes it (--holdout 1.5 in the CLI)
            return option_spelling(name, str(getattr(self, name)), QuantConfig, f"{name}={getattr(self, name)!r}")
        if self.rounding not in ROUNDINGS or not (isinstance(self.rounding_seconds, (int, float)) and self.rounding_seconds > 0):
            raise ConfigError(f"{said('rounding')}, {said('rounding_seconds')}: choose one of "
                              f"{', '.join(ROUNDINGS)}, and a positive number of seconds (e.g. 120)")
        if self.calibrator not in CALIBRATORS:
            raise ConfigError(f"{said('calibrator')}; choose one of {', '.join(CALIBRATORS)}")
        seconds = self.finetune_seconds
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0):
            raise ConfigError(f"{said('finetune_seconds')}: give a positive number of seconds (e.g. 120), or leave it out")
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"{said('placement')}; choose default (rules) or auto (measured)")
        if self.smoothquant is not None and not 0.0 <= self.smoothquant <= 1.0:
            raise ConfigError(f"{said('smoothquant')}: the SmoothQuant alpha must lie in [0, 1] (0.5 is usual)")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"{said('batch_size')}: the calibration batch size must be a positive integer")
        if not 0.0 < self.holdout < 1.0:
            raise ConfigError(f"{said('holdout')} must lie in (0, 1), e.g. 0.2")
        if self.task not in TASKS:
            raise ConfigError(f"{said('task')}; choose one of {', '.join(TASKS)}")
        if self.block_size is not None and (isinstance(self.block_size, bool) or not isinstance(self.block_size, int)
                                            or self.block_size < 16 or self.block_size & (self.block_size - 1)):
            raise ConfigError(f"{said('block_size')}: give a power of two of at least 16 (128 is usual), or leave it out")
        check_override(self.error_budget)
        if self.task != "auto":
            resolve_budget(self.task, self.error_budget)  # a float out of the task metric's range fails here
        # Tuples, so the frozen config hashes and compares by value even when given lists.
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "include", tuple(self.include))
        validate_patterns(self.exclude, "exclude")
        validate_patterns(self.include, "include")

    def calibration_key(self) -> dict[str, Any]:
        """The settings that change the scales (part of the calibration cache key)."""
        return {"calibrator": self.calibrator, "percentile": self.percentile if self.calibrator == "percentile" else None,
                "num_bins": self.num_bins, "smoothquant": self.smoothquant}

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cache_dir"] = str(self.cache_dir) if self.cache_dir else None
        data["exclude"], data["include"] = list(self.exclude), list(self.include)
        if isinstance(self.error_budget, ErrorBudget):
            data["error_budget"] = self.error_budget.record()
        return data


@dataclass(frozen=True)
class CompileConfig:
    """Every option of one compile. Frozen; values are checked and normalised when it is made.

    Example:
        >>> CompileConfig(precision="int8", quant=QuantConfig(calibrator="entropy")).float_dtype
        'float16'
    """

    precision: str = option("fp16", help=" | ".join((*PRECISIONS, AUTO_PRECISION)), affects=ENGINE, cli=CliFlag(str))
    batch: tuple[BatchProfile, ...] | None = option(
        None, affects=ENGINE, cli=CliFlag(str | None),
        help="N, min:opt:max, or several: 1:1:1,1:8:32; for dynamic dim 0s only (default: the model's own "
             "batch, 1 where dynamic)")
    batched_inputs: tuple[str, ...] | None = option(
        None, affects=ENGINE, cli=CliFlag(list[str] | None, None, ("--batched-input",), "batched_input", _names),
        help="inputs whose dim 0 is the batch (default: an ONNX file's dynamic dim 0s; a module's inputs whose "
             "dim 0 equals the first input's)")
    dynamic_batch: bool = option(
        False, affects=GRAPH, cli=CliFlag(bool),
        help="a static ONNX file: make dim 0 of its batched inputs and outputs dynamic (constants that hard-code "
             "the batch rewritten, proven in ONNX Runtime), so --batch can range (docs/batching.md)")
    path: str = option("onnx", affects=ENGINE, cli=CliFlag(str),
                       help="onnx | direct: through ONNX, or PyTorch straight to TensorRT (docs/direct-path.md)")
    targets: tuple[str, ...] = option(
        (), affects=ENGINE, help="compute capability, e.g. sm89 (repeatable)",
        cli=CliFlag(list[str] | None, None, ("--target",), "target", _tuple))
    output_dir: Path = option(Path("trtforge_out"), help="folder for the engine, sidecar and graphs",
                              affects=OUTPUT, cli=CliFlag(Path, decls=("-o", "--output-dir")))
    name: str | None = option(None, help="file-name stem (default: the model's)", affects=ENGINE, cli=CliFlag(str | None))
    optimization_level: int = option(3, help="builder optimization level 0..5", affects=ENGINE,
                                     cli=CliFlag(int, decls=("--opt-level",), name="opt_level"))
    workspace_bytes: int | None = option(
        None, help="workspace limit in bytes (None: no limit)", affects=ENGINE,
        cli=CliFlag(int | None, name="workspace_mb", to_field=_mib, help="workspace limit in MiB"))
    quant: QuantConfig = option(help=f"{'/'.join(QUANTIZED_PRECISIONS)}: how to quantize (its flags: --calibrator, "
                                     "--placement, ...)",
                                affects=GRAPH, factory=QuantConfig)
    preprocessing: PreprocessConfig | None = option(
        None, affects=OUTPUT, cli=CliFlag(Path | None, to_field=read_preprocessing_json,
                                         help="JSON preprocessing (or a sidecar), for --calib images"),
        help="image preprocessing for the sidecar (and int8 image calibration; the graph shows its effect)")
    progress: bool = option(True, help="progress bars", affects=OUTPUT,
                            cli=CliFlag(bool, False, ("-q", "--quiet"), name="quiet", to_field=lambda quiet: not quiet,
                                        help="no progress bars"))
    cache: bool = option(True, help="use the engine cache", affects=OUTPUT, cli=CliFlag(bool))
    cache_dir: Path | None = option(None, help="engine cache folder", affects=OUTPUT, cli=CliFlag(Path | None))
    timing_cache: Path | None = option(None, help="timing cache file (full TensorRT)", affects=OUTPUT,
                                       cli=CliFlag(Path | None))
    hardware_compatibility: str | None = option(None, help="ampere_plus | same_compute_capability",
                                                affects=ENGINE, cli=CliFlag(str | None))
    version_compatible: bool = option(False, help="embed the lean runtime (host code)", affects=ENGINE,
                                      cli=CliFlag(bool))
    refittable: bool = option(False, help="allow trtforge refit", affects=ENGINE, cli=CliFlag(bool))
    strip_weights: bool = option(False, help="weight-stripped plan (refit before use)", affects=ENGINE,
                                 cli=CliFlag(bool))
    shapes: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = option(
        (), affects=ENGINE, help="{input: (min, opt, max)} shapes for dynamic dims beyond the batch",
        cli=CliFlag(list[str] | None, None, to_field=parse_shapes,
                    help="NAME:MIN:OPT:MAX, dims joined by x (repeatable), e.g. x:1x3x32x32:1x3x640x640:1x3x1280x1280"))
    keep_fp32: tuple[str, ...] = option(
        (), affects=GRAPH, help="fp16/bf16: keep nodes matching this regex (node name, first output, layer) or op "
                                "type in FP32 (repeatable; reason recorded; trtforge debug precision prints them)",
        cli=CliFlag(list[str] | None, None, to_field=_tuple, help="fp16/bf16: keep nodes matching this regex FP32"))
    layer_precision: tuple[tuple[str, str], ...] = option(
        (), affects=GRAPH, help="fp16/bf16: {pattern: precision}; 'fp32' keeps matching nodes in FP32 as keep_fp32 "
                                "does (same graph, same cache key); the build's own type changes nothing",
        cli=CliFlag(list[str] | None, None, to_field=parse_layer_precision,
                    help="fp16/bf16: PATTERN:fp32 keeps matching nodes FP32 (repeatable)"))
    overwrite: bool = option(False, affects=OUTPUT, cli=CliFlag(bool),
                             help="replace a different trtforge build of the same name in output_dir")
    strict_accuracy: bool = option(False, affects=OUTPUT, cli=CliFlag(bool),
                                   help="int8: fail (exit 1) when the error budget is missed, instead of a warning")
    allow_unaccelerated: bool = option(False, affects=ENGINE, cli=CliFlag(bool), help=(
        "build quantized layers that no target GPU accelerates (they run in the float type; sidecar note)"))
    min_block_size: int | None = option(
        None, affects=GRAPH, cli=CliFlag(int | None),
        help="direct path: partition, keeping ops with no converter in PyTorch; runs of at least this many compute "
             "ops become engines (None: the whole module converts, or the op is refused)")
    torch_executed_ops: tuple[str, ...] = option(
        (), affects=GRAPH, cli=CliFlag(list[str] | None, None, ("--torch-executed-op",), "torch_executed_op", _tuple),
        help="direct path: ops kept in PyTorch, e.g. aten.softmax.int (repeatable; partitions the module)")
    input_names: tuple[str, ...] | None = option(None, help="names of the exported inputs", affects=GRAPH)
    output_names: tuple[str, ...] | None = option(None, help="names of the exported outputs", affects=GRAPH)
    notes: tuple[str, ...] = option((), help="free-text notes for the sidecar", affects=OUTPUT)
    outputs: tuple[str, ...] | None = option(
        None, affects=GRAPH, cli=CliFlag(list[str] | None, None, to_field=_outputs, help=(
            "NAME[,NAME...]: cut the graph at these tensors (they become its outputs; dead nodes go)")),
        help="cut the graph at these tensors, e.g. a detector's raw head before its NonZero/NonMaxSuppression")
    postprocess: NMS | None = option(None, affects=GRAPH, help="trtforge.NMS(head, ...): fixed-shape NMS "
                                     "appended to the raw head (trtforge build --nms HEAD)")

    def __post_init__(self) -> None:
        precision = str(self.precision).lower()
        if precision not in PRECISIONS and precision != AUTO_PRECISION:
            raise ConfigError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}, {AUTO_PRECISION}")
        path = str(self.path).lower()
        if path not in PATHS:
            raise ConfigError(f"unknown path {path!r}; choose one of {', '.join(PATHS)}")
        if self.optimization_level not in OPTIMIZATION_LEVELS:
            raise ConfigError(f"optimization_level={self.optimization_level} must be 0..5 (3 is TensorRT's default)")
        if self.workspace_bytes is not None and self.workspace_bytes <= 0:
            raise ConfigError(f"workspace_bytes={self.workspace_bytes} must be positive, or None for no limit")
        hardware = None if self.hardware_compatibility is None else str(self.hardware_compatibility).lower()
        if hardware is not None and hardware not in machine.HARDWARE_LEVELS:
            raise ConfigError(f"hardware_compatibility={hardware!r}; choose one of "
                              f"{', '.join(machine.HARDWARE_LEVELS)}, or None")
        quant = QuantConfig() if self.quant is None else self.quant
        if not isinstance(quant, QuantConfig):
            raise WrongType(f"quant= takes a QuantConfig (trtforge.CompileConfig's quant), not {type(quant).__name__}")
        if self.preprocessing is not None and not isinstance(self.preprocessing, (Mapping, PreprocessConfig)):
            raise WrongType(f"preprocessing= takes a dict such as {{'resize': [224, 224]}} or a PreprocessConfig, "
                            f"not {type(self.preprocessing).__name__}")
        normalised = {
            "precision": precision, "path": path, "batch": None if self.batch is None else parse_batch(self.batch), "targets": machine.normalise_targets(self.targets),
            "shapes": normalise_shapes(self.shapes), "hardware_compatibility": hardware, "quant": quant,
            "name": None if self.name is None else validate_name(self.name),
            "output_dir": Path(self.output_dir), "cache_dir": _path(self.cache_dir),
            "input_names": _names(self.input_names), "output_names": _names(self.output_names),
            "batched_inputs": _names(self.batched_inputs),
            "notes": (self.notes,) if isinstance(self.notes, str) else tuple(self.notes or ()),
            "keep_fp32": _tuple((self.keep_fp32,) if isinstance(self.keep_fp32, str) else self.keep_fp32),
            "layer_precision": layer_precisions(self.layer_precision),
            "min_block_size": check_min_block_size(self.min_block_size),
            "torch_executed_ops": op_names(self.torch_executed_ops),
            "preprocessing": None if self.preprocessing is None else PreprocessConfig.of(self.preprocessing),
            "outputs": _outputs(self.outputs) or None, "postprocess": NMS.of(self.postprocess),
        }
        if path == "direct" and (normalised["outputs"] or normalised["postprocess"]):
            raise ConfigError(spelled(cli="--outputs and --nms edit the ONNX graph; drop --path direct, or them",
                                      python="outputs= and postprocess= edit the ONNX graph; build with "
                                             "path='onnx', or leave them out"))
        validate_patterns(normalised["keep_fp32"], "keep_fp32")
        check_layer_precision(normalised["layer_precision"], precision)
        check_quant_options(quant, precision)
        for flag in ("version_compatible", "refittable", "strip_weights", "progress", "cache", "overwrite",
                     "strict_accuracy", "allow_unaccelerated", "dynamic_batch"):
            normalised[flag] = bool(getattr(self, flag))
        check_batch_and_shapes(normalised["batch"], normalised["shapes"])
        for key, value in normalised.items():
            object.__setattr__(self, key, value)

    def with_overrides(self, **overrides: Any) -> CompileConfig:
        """This config with some fields replaced; an unknown name is refused with the valid ones."""
        unknown = sorted(set(overrides) - {f.name for f in fields(self)})
        if unknown:
            raise WrongType(f"unknown option(s) {', '.join(unknown)}; CompileConfig's options are "
                            f"{', '.join(f.name for f in fields(self))}")
        return replace(self, **overrides) if overrides else self

    @property
    def float_dtype(self) -> str | None:
        return FLOAT_OF_PRECISION.get(self.precision, "float16")  # auto: quantized layers in an FP16 graph

    @property
    def fp32_patterns(self) -> tuple[str, ...]:
        """Patterns of the nodes the user keeps in FP32: ``keep_fp32`` and ``layer_precision``'s ``fp32`` entries.

        Example:
            >>> CompileConfig(keep_fp32=["Softmax"], layer_precision={"^/head/": "fp32"}).fp32_patterns
            ('Softmax', '^/head/')
        """
        return tuple(dict.fromkeys((*self.keep_fp32, *(p for p, want in self.layer_precision if want == "fp32"))))

    @property
    def partitions(self) -> bool:
        """Whether the direct path partitions: ``min_block_size`` or ``torch_executed_ops`` is set."""
        return self.min_block_size is not None or bool(self.torch_executed_ops)

    @property
    def block_size(self) -> int:
        """The fewest compute ops in an engine partition (``DEFAULT_MIN_BLOCK_SIZE`` when only ops are named)."""
        return DEFAULT_MIN_BLOCK_SIZE if self.min_block_size is None else self.min_block_size

    @property
    def shapes_map(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        return dict(self.shapes)

    @property
    def possible_precisions(self) -> tuple[str, ...]:
        """The precisions the engine's file name may carry: a quantized precision is built as FP16 when
        placement keeps every layer in FP16."""
        asked = sum(AUTO_LADDER, ()) if self.precision == AUTO_PRECISION else (self.precision,)  # auto: its rungs
        return (*asked, "fp16") if self.precision in QUANTIZED_REQUESTS else asked

    def key_fields(self) -> dict[str, Any]:
        """JSON-able values of the options that change the engine's bytes (cache keys, sidecars)."""
        data = {name: getattr(self, name) for name, opt in options_of(CompileConfig) if opt.affects == ENGINE}
        data["batch"] = None if self.batch is None else [str(b) for b in self.batch]
        data["batched_inputs"] = None if self.batched_inputs is None else list(self.batched_inputs)
        data["targets"] = list(self.targets)
        data["shapes"] = [[name, [list(s) for s in triple]] for name, triple in self.shapes]
        return data

    def record_fields(self) -> dict[str, Any]:
        """The build request as the sidecar records it (``builder.config``): ``key_fields`` and the graph options a
        rebuild from the source file needs (``dynamic_batch``, the cut ``outputs``, the ``postprocess`` NMS; the
        engine key sees them through the graph's bytes)."""
        data = self.key_fields()
        if self.dynamic_batch:  # only when set: other builds' records stay as they were
            data["dynamic_batch"] = True
        if self.outputs:
            data["outputs"] = list(self.outputs)
        if self.postprocess is not None:
            data["postprocess"] = self.postprocess.as_dict()
        return data

    def graph_fields(self) -> dict[str, Any]:
        """JSON-able values of the options that change the processed graph (the request key's part)."""
        data: dict[str, Any] = {"input_names": list(self.input_names or []),
                                "output_names": list(self.output_names or [])}
        if self.precision in QUANTIZED_REQUESTS:
            data["quant"] = {k: v for k, v in self.quant.as_dict().items() if k != "cache_dir"}
        if self.dynamic_batch:
            data["dynamic_batch"] = True
        if self.partitions:  # only when set: the keys of builds without partitioning stay as they were
            data["partition"] = {"min_block_size": self.block_size, "torch_executed_ops": list(self.torch_executed_ops)}
        if self.outputs:  # cut and NMS only when set: other builds' keys stay as they were
            data["outputs"] = list(self.outputs)
        if self.postprocess is not None:
            data["postprocess"] = self.postprocess.as_dict()
        if self.fp32_patterns:  # --keep-fp32 X and --layer-precision X:fp32 make one graph, one key
            data["keep_fp32"] = list(self.fp32_patterns)
        return data


#: The options that do not change the engine (no key reads them).
NOT_IN_KEY: tuple[str, ...] = tuple(name for name, opt in options_of(CompileConfig) if opt.affects == OUTPUT)


def _path(value: Any) -> Path | None:
    return None if value is None else Path(value)


def unused_quant_options(config: CompileConfig) -> list[str]:
    """The quantization options (``QuantConfig`` fields, the calibration cache aside) a build of a
    non-quantized precision was given and ignores, spelled for the reader: ``['--placement auto']``.

    Example:
        >>> unused_quant_options(CompileConfig(precision="fp16", quant=QuantConfig(placement="auto")))
        ["quant.placement='auto'"]
    """
    if config.precision in QUANTIZED_REQUESTS or config.quant is None:
        return []
    default = QuantConfig()
    changed = [f.name for f in fields(QuantConfig) if f.name != "cache_dir"
               and getattr(config.quant, f.name) != getattr(default, f.name)]
    return [spelled(cli=option_spelling(name, str(getattr(config.quant, name)), QuantConfig),
                    python=f"quant.{name}={getattr(config.quant, name)!r}") for name in changed]
