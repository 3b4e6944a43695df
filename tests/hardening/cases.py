"""The bad inputs and faults the hardening suite drives through the CLI: one function per case.

Each case prepares its folder and returns a ``Case``: the command that must fail (exit code, a pattern
its one stderr line must match) and how to remove the cause (``fix`` changes files and returns the
command that must then succeed; None: the same command).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness import EXIT_CANCELLED, fill, small_tmpfs
from onnx import TensorProto, helper

USER, FAILED = 2, 1


@dataclass
class Case:
    argv: list[str]
    expect: int
    match: str
    fix: Callable[[], list[str] | None] | None = None
    sigint_at: str | None = None
    #: The engine cache this case uses (None: the suite's shared one).
    cache: Path | None = None
    #: Paths (relative to the case's folder) that must not exist after the failing command, e.g. the output
    #: folder a build made and left empty.
    absent: tuple[str, ...] = ()


@dataclass
class Ctx:
    """One case's folder, the shared inputs, and what to undo afterwards."""

    tmp: Path
    inputs: dict[str, Path]
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def copy(self, key: str, name: str | None = None) -> Path:
        target = self.tmp / (name or self.inputs[key].name)
        shutil.copy(self.inputs[key], target)
        return target

    def art(self) -> Path:
        """A copy of a finished build of tiny; returns its sidecar."""
        shutil.copytree(self.inputs["art"], self.tmp / "art")
        return self.tmp / "art" / "tiny_fp16.json"

    def write(self, name: str, data: bytes | str) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path


CASES: dict[str, Callable[[Ctx], Case]] = {}
#: The cases whose failing command must be a process of its own: a real signal (``sigint_at``) arrives at it.
#: Every other command runs in the test process (tests/hardening/test_cli_table.py).
PROCESS_CASES: set[str] = set()


def case(name: str) -> Callable:
    def register(func: Callable[[Ctx], Case]) -> Callable[[Ctx], Case]:
        CASES[name] = func
        return func
    return register


def build(ctx: Ctx, *extra: str, model: str | Path | None = None) -> list[str]:
    """``build MODEL -o out -q`` plus ``extra``; the model defaults to a copy of tiny.onnx."""
    model = model or (ctx.tmp / "tiny.onnx" if (ctx.tmp / "tiny.onnx").exists() else ctx.copy("tiny"))
    return ["build", str(model), "-o", str(ctx.tmp / "out"), "-q", *extra]


def bad_option(flag: str, value: str, match: str, good: str | None = None) -> Callable[[Ctx], Case]:
    """A build with one bad option value; the fix drops it (or gives ``good``)."""
    def make(ctx: Ctx) -> Case:
        fixed = [flag, good] if good is not None else []
        return Case(build(ctx, flag, value), USER, match, fix=lambda: build(ctx, *fixed))
    return make


# -- bad options: refused before any work, exit 2 ----------------------------------------------------
for _name, _flag, _value, _match, _good in [
    ("batch_letters", "--batch", "a:b:c", r"batch 'a:b:c': .*integers", None),
    ("batch_negative", "--batch", "-1:-1", r"batch '-1:-1'", None),  # rich once printed an emoji here
    ("batch_zero", "--batch", "0", r"positive integer", None),
    ("batch_min_over_opt", "--batch", "8:4:16", r"min <= opt <= max", "1:4:16"),
    ("batch_overflow", "--batch", "99999999999999999999", r"larger than TensorRT's dims allow", None),
    ("batch_duplicate", "--batch", "1:1:1,1:1:1", r"given twice", "1:1:1,1:2:4"),
    ("precision_unknown", "--precision", "fp4", r"unknown precision 'fp4'", "fp32"),
    ("target_unknown", "--target", "sm99", r"unknown target", None),
    ("target_list_unknown", "--target", "sm86,sm99", r"unknown target\(s\) \['sm99'\]", None),
    ("opt_level", "--opt-level", "9", r"must be 0\.\.5", "3"),
    ("workspace_zero", "--workspace-mb", "0", r"--workspace-mb 0: give a positive size", "64"),
    ("name_empty", "--name", "", r"name '' is empty", None),
    ("name_separator", "--name", "a/b", r"path separator", None),
    ("name_too_long", "--name", "n" * 300, r"300 characters long", None),
    ("name_markup", "--name", "[bold]x", r"name '\[bold\]x': use letters", None),
    ("hardware_level", "--hardware-compatibility", "bogus", r"ampere_plus", None),
    ("shapes_syntax", "--shapes", "x:1x3", r"--shapes 'x:1x3': write NAME:MIN:OPT:MAX", None),
    ("shapes_min_over_max", "--shapes", "x:1x3x32x32:1x3x16x16:1x3x8x8", r"min <= opt <= max", None),
    ("shapes_letters", "--shapes", "x:1x3xAx4:1x3x4x4:1x3x4x4", r"dims must be integers", None),
    ("shapes_unknown_input", "--shapes", "nope:1x3x16x16:1x3x16x16:1x3x16x16", r"unknown inputs \['nope'\]", None),
    ("keep_fp32_bad_regex", "--keep-fp32", "(", r"not a valid regular expression", None),
    ("keep_fp32_no_match", "--keep-fp32", "no_such_node", r"matches no node", None),
    ("layer_precision_malformed", "--layer-precision", "Conv", r"--layer-precision 'Conv': write PATTERN:PRECISION",
     "Conv:fp32"),
    ("layer_precision_unknown", "--layer-precision", "Conv:int8", r"can be given fp32, fp16, bf16, not 'int8'", None),
    ("layer_precision_other_float", "--layer-precision", "Conv:bf16",
     r"Conv:bf16 with precision fp16: a graph computes in one float type", "Conv:fp32"),
    ("calibrator_unknown", "--calibrator", "magic", r"--calibrator magic; choose one of", None),
    ("holdout_out_of_range", "--holdout", "1.5", r"--holdout 1.5 must lie in", None),
    ("calib_batch_size_zero", "--calib-batch-size", "0", r"--calib-batch-size 0: the calibration batch size must be a positive", None),
    ("smoothquant_out_of_range", "--smoothquant", "3", r"--smoothquant 3.0: the SmoothQuant alpha must lie in", None),
]:
    CASES[_name] = bad_option(_flag, _value, _match, _good)


@case("refittable_without_gpu")
def _refittable(ctx: Ctx) -> Case:
    return Case(build(ctx, "--refittable"), USER, r"TensorRT-RTX compiles refittable", fix=lambda: build(ctx))


@case("calib_without_int8")
def _calib_without_int8(ctx: Ctx) -> Case:
    calib = ctx.copy("calib")
    return Case(build(ctx, "--calib", str(calib)), USER, r"--calib is used only by --precision int8",
                fix=lambda: build(ctx))


@case("int8_without_calib")
def _int8_without_calib(ctx: Ctx) -> Case:
    return Case(build(ctx, "--precision", "int8", "--allow-unaccelerated"), USER, r"--precision int8 needs --calib DATA",
                fix=lambda: build(ctx, "--precision", "int8", "--allow-unaccelerated", "--calib", str(ctx.copy("calib"))))


@case("int8_no_target_accelerates")
def _int8_no_target_accelerates(ctx: Ctx) -> Case:
    """TensorRT-RTX runs no W8A8 INT8 (builder.capability): refused before calibration, unless allowed."""
    argv = build(ctx, "--precision", "int8", "--calib", str(ctx.copy("calib")))
    return Case(argv, USER, r"TensorRT-RTX runs INT8 only as weight-only GEMM: .*--precision int8-wo",
                fix=lambda: [*argv, "--allow-unaccelerated"])


@case("calib_not_an_image")
def _calib_not_an_image(ctx: Ctx) -> Case:
    folder = ctx.tmp / "calib_images"
    ctx.write("calib_images/a.jpg", "not a jpeg")
    pre = ctx.write("pre.json", json.dumps({"resize": [16, 16], "mean": [0, 0, 0], "std": [1, 1, 1]}))
    argv = build(ctx, "--precision", "int8", "--allow-unaccelerated", "--calib", str(folder), "--preprocessing", str(pre))
    return Case(argv, USER, r"calibration image .*a\.jpg cannot be read as an image",
                fix=lambda: build(ctx, "--precision", "int8", "--allow-unaccelerated", "--calib", str(ctx.copy("calib"))))


@case("calib_garbage_npy")
def _calib_garbage_npy(ctx: Ctx) -> Case:
    bad = ctx.write("calib.npy", b"\x93NUMPY garbage that is no array")
    return Case(build(ctx, "--precision", "int8", "--allow-unaccelerated", "--calib", str(bad)), USER, r"calib\.npy is not a readable \.npy",
                fix=lambda: (ctx.copy("calib"), None)[1])


@case("calib_missing")
def _calib_missing(ctx: Ctx) -> Case:
    return Case(build(ctx, "--precision", "int8", "--allow-unaccelerated", "--calib", str(ctx.tmp / "nope.npy")), USER, r"does not exist",
                fix=lambda: (ctx.copy("calib", "nope.npy"), None)[1])


@case("preprocessing_bad_json")
def _preprocessing_bad_json(ctx: Ctx) -> Case:
    pre = ctx.write("pre.json", "{bad")
    return Case(build(ctx, "--preprocessing", str(pre)), USER, r"pre\.json is not valid JSON",
                fix=lambda: (pre.write_text('{"resize": [16, 16]}'), None)[1])


@case("preprocessing_missing")
def _preprocessing_missing(ctx: Ctx) -> Case:
    return Case(build(ctx, "--preprocessing", str(ctx.tmp / "pre.json")), USER, r"does not exist",
                fix=lambda: (ctx.write("pre.json", '{"resize": [16, 16]}'), None)[1])


# -- bad model files ---------------------------------------------------------------------------------
def _model_case(content: Callable[[Ctx], bytes | None], match: str, expect: int = USER, name: str = "m.onnx"):
    def make(ctx: Ctx) -> Case:
        data = content(ctx)
        model = ctx.write(name, data) if data is not None else ctx.tmp / name
        return Case(build(ctx, model=model), expect, match, fix=lambda: (
            model.parent.mkdir(parents=True, exist_ok=True), shutil.copy(ctx.inputs["tiny"], model), None)[2])
    return make


def _graph(nodes, inputs, outputs, opsets=(("", 20),)) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]).SerializeToString()


CASES["model_missing"] = _model_case(lambda ctx: None, r"does not exist")
CASES["model_not_onnx"] = _model_case(lambda ctx: b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, r"is not an ONNX model")
CASES["model_empty"] = _model_case(lambda ctx: b"", r"holds no graph|not an ONNX model")
CASES["model_truncated"] = _model_case(lambda ctx: ctx.inputs["tiny"].read_bytes()[:300],
                                       r"not an ONNX model|not a valid ONNX graph|holds no graph")
CASES["model_path_with_markup"] = _model_case(lambda ctx: None, r"\[/\]x\.onnx does not exist", name="[/]x.onnx")
CASES["model_name_leading_underscore"] = _model_case(lambda ctx: b"junk", r"_best\.onnx is not an ONNX model",
                                                     name="_best.onnx")
CASES["model_invalid_graph"] = _model_case(lambda ctx: _graph(
    [helper.make_node("Relu", ["x"], ["y"], name="r"), helper.make_node("Add", ["y", "zz"], ["z"], name="a")],
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
    [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["b", 4])]), r"is not a valid ONNX graph")
CASES["model_unsupported_op"] = _model_case(lambda ctx: _graph(
    [helper.make_node("Unique", ["x"], ["y"], name="u")], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])]),
    r"cannot parse .*m\.onnx: node 'u' \(Unique\): UNSUPPORTED_NODE \(checkUnique\)")
CASES["model_custom_op"] = _model_case(lambda ctx: _graph(
    [helper.make_node("MyOp", ["x"], ["y"], name="c", domain="custom")],
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], (("", 20), ("custom", 1))),
    r"cannot parse .*m\.onnx: node 'c' \(MyOp\)")


@case("model_is_a_folder")
def _model_is_a_folder(ctx: Ctx) -> Case:
    folder = ctx.tmp / "m.onnx"
    folder.mkdir()
    return Case(build(ctx, model=folder), USER, r"is a directory",
                fix=lambda: (folder.rmdir(), shutil.copy(ctx.inputs["tiny"], folder), None)[2])


@case("output_is_a_file")
def _output_is_a_file(ctx: Ctx) -> Case:
    out = ctx.write("out", "a file")
    return Case(build(ctx), USER, r"output_dir .*out is a file", fix=lambda: (out.unlink(), None)[1])


@case("output_unwritable")
def _output_unwritable(ctx: Ctx) -> Case:
    argv = ["build", str(ctx.copy("tiny")), "-o", "/proc/trtforge_out", "-q"]
    return Case(argv, USER, r"is not writable", fix=lambda: build(ctx))


@case("foreign_engine_in_output")
def _foreign_engine(ctx: Ctx) -> Case:
    foreign = ctx.write("out/tiny_fp16.engine", "someone else's engine")
    return Case(build(ctx), USER, r"exists without a trtforge sidecar", fix=lambda: (foreign.unlink(), None)[1])


@case("foreign_json_in_output")
def _foreign_json(ctx: Ctx) -> Case:
    foreign = ctx.write("out/tiny_fp16.json", '{"mine": true}')
    return Case(build(ctx), USER, r"was not written by trtforge", fix=lambda: (foreign.unlink(), None)[1])


@case("different_batch_same_name")
def _different_batch(ctx: Ctx) -> Case:
    shutil.copytree(ctx.inputs["art"], ctx.tmp / "out")  # a build of tiny with batch 1
    return Case(build(ctx, "--batch", "1:2:4"), USER, r"holds a different trtforge build of 'tiny' \(batch",
                fix=lambda: build(ctx, "--batch", "1:2:4", "--overwrite"))


@case("different_model_same_name")
def _different_model(ctx: Ctx) -> Case:
    shutil.copytree(ctx.inputs["art"], ctx.tmp / "out")  # tiny, seed 0
    other = ctx.copy("tiny_seed1", "tiny.onnx")  # same name, other weights
    return Case(build(ctx, model=other), USER, r"holds another model's graph",
                fix=lambda: build(ctx, "--overwrite", model=other))


@case("cache_dir_is_a_file")
def _cache_dir_is_a_file(ctx: Ctx) -> Case:
    bad = ctx.write("cachefile", "x")
    return Case(build(ctx, "--cache-dir", str(bad)), USER, r"cache_dir .* is a file",
                fix=lambda: build(ctx, "--cache-dir", str(ctx.tmp / "cache")))


# -- inspect: folders, ONNX files and hostile sidecars ---------------------------------------------
def _sidecar_case(edit: Callable[[dict], None], match: str, expect: int = USER) -> Callable[[Ctx], Case]:
    def make(ctx: Ctx) -> Case:
        sidecar = ctx.art()
        good = sidecar.read_text()
        data = json.loads(good)
        edit(data)
        sidecar.write_text(json.dumps(data))
        return Case(["inspect", str(sidecar)], expect, match, fix=lambda: (sidecar.write_text(good), None)[1])
    return make


def _pop(*keys: str) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        target = data
        for key in keys[:-1]:
            target = target[key] if not isinstance(target, list) else target[int(key)]
        del target[keys[-1]]
    return edit


def _set(value, *keys: str) -> Callable[[dict], None]:
    def edit(data: dict) -> None:
        target = data
        for key in keys[:-1]:
            target = target[key] if not isinstance(target, list) else target[int(key)]
        target[keys[-1]] = value
    return edit


CASES["sidecar_no_engine"] = _sidecar_case(_pop("engine"), r"lacks engine \(it must be an object\)")
CASES["sidecar_no_inputs"] = _sidecar_case(_pop("inputs"), r"lacks inputs")
CASES["sidecar_no_name"] = _sidecar_case(_pop("name"), r"lacks name")
CASES["sidecar_no_engine_sha256"] = _sidecar_case(_pop("engine", "sha256"), r"lacks engine\.sha256")
CASES["sidecar_no_input_shape"] = _sidecar_case(_pop("inputs", "0", "shape"), r"bad inputs\[0\]")
CASES["sidecar_no_profile_opt"] = _sidecar_case(_pop("profiles", "0", "x", "opt"), r"bad profiles\[0\]")
CASES["sidecar_inputs_null"] = _sidecar_case(_set(None, "inputs"), r"lacks inputs")
CASES["sidecar_engine_size_text"] = _sidecar_case(_set("big", "engine", "size"), r"has str at engine\.size")
CASES["sidecar_engine_escapes"] = _sidecar_case(_set("../../../etc/passwd", "engine", "file"),
                                                r"engine\.file '\.\./\.\./\.\./etc/passwd' is not a plain file name")
CASES["sidecar_engine_absolute"] = _sidecar_case(_set("/etc/passwd", "engine", "file"), r"not a plain file name")
CASES["sidecar_onnx_escapes"] = _sidecar_case(_set("../x.onnx", "source", "reference_onnx_file"),
                                              r"source\.reference_onnx_file '\.\./x\.onnx' is not a plain")
CASES["sidecar_newer_schema"] = _sidecar_case(_set(99, "schema_version"), r"schema_version 99; .*Upgrade trtforge")
CASES["sidecar_not_trtforge"] = _sidecar_case(_pop("generator"), r"is not a trtforge sidecar")
CASES["sidecar_markup_name"] = _sidecar_case(_set("a/[red]b", "name"), r"name 'a/\[red\]b' is not a plain name")


@case("sidecar_not_json")
def _sidecar_not_json(ctx: Ctx) -> Case:
    sidecar = ctx.art()
    good = sidecar.read_text()
    sidecar.write_text("{not json")
    return Case(["inspect", str(sidecar)], USER, r"is not valid JSON", fix=lambda: (sidecar.write_text(good), None)[1])


@case("engine_altered")
def _engine_altered(ctx: Ctx) -> Case:
    sidecar = ctx.art()
    engine = sidecar.with_suffix(".engine")
    good = engine.read_bytes()
    engine.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    return Case(["inspect", str(sidecar)], FAILED, r"does not match its sidecar",
                fix=lambda: (engine.write_bytes(good), None)[1])


@case("engine_missing")
def _engine_missing(ctx: Ctx) -> Case:
    sidecar = ctx.art()
    engine = sidecar.with_suffix(".engine")
    good = engine.read_bytes()
    engine.unlink()
    return Case(["inspect", str(sidecar)], FAILED, r"does not exist", fix=lambda: (engine.write_bytes(good), None)[1])


@case("inspect_folder")
def _inspect_folder(ctx: Ctx) -> Case:
    sidecar = ctx.art()
    return Case(["inspect", "."], USER, r"\. is a folder; pass an engine's \.json", fix=lambda: ["inspect", str(sidecar)])


@case("inspect_corrupt_onnx")
def _inspect_corrupt_onnx(ctx: Ctx) -> Case:
    bad = ctx.tmp / "corrupt.onnx"
    bad.write_bytes(b"not a protobuf")
    good = ctx.tmp / "art" / "tiny_fp16.onnx"
    ctx.art()
    return Case(["inspect", str(bad)], USER, r"corrupt\.onnx is not an ONNX model", fix=lambda: ["inspect", str(good)])


@case("cache_prune_negative")
def _cache_prune_negative(ctx: Ctx) -> Case:
    cache = ctx.tmp / "cache"
    return Case(["cache", "prune", "--cache-dir", str(cache), "--max-mb", "-1"], USER, r"--max-mb -1: give 0 or more",
                fix=lambda: ["cache", "prune", "--cache-dir", str(cache), "--max-mb", "0"])


@case("cache_ls_dir_is_a_file")
def _cache_ls_file(ctx: Ctx) -> Case:
    bad = ctx.write("cachefile", "x")
    return Case(["cache", "ls", "--cache-dir", str(bad)], USER, r"is a file",
                fix=lambda: ["cache", "ls", "--cache-dir", str(ctx.tmp / "cache")])


# -- full file systems (a size-limited tmpfs) ------------------------------------------------------
@case("output_disk_full")
def _output_disk_full(ctx: Ctx) -> Case:
    disk = ctx.stack.enter_context(small_tmpfs(ctx.tmp / "disk", "2m"))
    filler = fill(disk, leave_bytes=128 * 1024)  # the 0.5 MB engine does not fit
    argv = ["build", str(ctx.copy("tiny")), "-o", str(disk / "out"), "-q", "--no-cache"]
    return Case(argv, FAILED, r"No space left on device", fix=lambda: (filler.unlink(), None)[1])


@case("output_disk_full_after_engine")
def _output_disk_full_after_engine(ctx: Ctx) -> Case:
    # Room for the engine and one page more: the graphs or the sidecar no longer fit. Before issue 15
    # the engine was left without its sidecar, and the retry was refused.
    disk = ctx.stack.enter_context(small_tmpfs(ctx.tmp / "disk", "2m"))
    (disk / "out").mkdir()
    engine = (ctx.inputs["art"] / "tiny_fp16.engine").stat().st_size
    filler = fill(disk, leave_bytes=-(-engine // 4096) * 4096 + 4096)
    argv = ["build", str(ctx.copy("tiny")), "-o", str(disk / "out"), "-q", "--no-cache"]
    return Case(argv, FAILED, r"No space left on device", fix=lambda: (filler.unlink(), None)[1])


# -- Ctrl-C at each stage ------------------------------------------------------------------------------
#: docs/reliability.md's line for Ctrl-C, whole.
INTERRUPTED_LINE = r"^interrupted \(Ctrl-C\); no file was left half-written$"
for _stage, _function in [
    ("validate", "trtforge.pipeline.validate:validate"),
    ("capture", "trtforge.pipeline.onnx_path:_capture"),
    ("passes", "trtforge.passes.process:process"),
    ("build_start", "trtforge.builder.build:build_engine"),
    ("build_running", "trtforge.builder.progress:BuildProgress.phase_start"),
    ("cache_store", "trtforge.cache.engine_cache:EngineCache.put"),
    ("write", "trtforge.core.atomic:_staged"),
]:
    def _sigint(ctx: Ctx, function: str = _function) -> Case:
        # The line docs/reliability.md promises, the same at every stage; the output folder the build made is gone.
        return Case(build(ctx, "--batch", "1:3:5"), EXIT_CANCELLED, INTERRUPTED_LINE, sigint_at=function,
                    cache=ctx.tmp / "cache", absent=("out",))
    CASES[f"sigint_{_stage}"] = _sigint
    PROCESS_CASES.add(f"sigint_{_stage}")


# -- usage errors (click's own): one line too ---------------------------------------------------------
@case("usage_unknown_option")
def _unknown_option(ctx: Ctx) -> Case:
    return Case(build(ctx, "--bogus"), USER, r"No such option: --bogus( \(Possible options: [-\w, ]+\))?; see 'trtforge build --help'",  # click may suggest
                fix=lambda: build(ctx))


@case("usage_missing_model")
def _missing_model(ctx: Ctx) -> Case:
    return Case(["build"], USER, r"Missing argument 'model'", fix=lambda: build(ctx))


@case("usage_opt_level_not_a_number")
def _opt_level_text(ctx: Ctx) -> Case:
    return Case(build(ctx, "--opt-level", "x"), USER, r"Invalid value for '--opt-level'", fix=lambda: build(ctx))


@case("usage_unknown_command")
def _unknown_command(ctx: Ctx) -> Case:
    return Case(["bulid"], USER, r"No such command 'bulid'", fix=lambda: build(ctx))


# -- issue 20: found on models nobody here wrote --------------------------------------------------------
def _static_relu(ctx: Ctx, name: str = "static.onnx") -> Path:
    """x [1, 4] → Relu → y: a model exported at a fixed batch 1."""
    return ctx.write(name, _graph([helper.make_node("Relu", ["x"], ["y"], name="r")],
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])]))


@case("batch_on_static_model")
def _batch_on_static_model(ctx: Ctx) -> Case:
    model = _static_relu(ctx)
    return Case(build(ctx, "--batch", "1:8:32", model=model), USER, r"fixed batch 1 but --batch 1:8:32 .*add --dynamic-batch",
                fix=lambda: build(ctx, "--batch", "1:8:32", "--dynamic-batch", model=model))


@case("shapes_on_static_dims")
def _shapes_on_static_dims(ctx: Ctx) -> Case:
    model = _static_relu(ctx)
    return Case(build(ctx, "--shapes", "x:1x4:2x4:4x4", model=model), USER,
                r"dim 0 fixed at 1 .*--shapes asks \[1, 2, 4\] there.*add --dynamic-batch",
                fix=lambda: build(ctx, "--shapes", "x:1x4:2x4:4x4", "--dynamic-batch", model=model))


@case("dynamic_batch_pinned")
def _dynamic_batch_pinned(ctx: Ctx) -> Case:
    model = ctx.tmp / "pinned.onnx"
    proto = helper.make_model(helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1, name="sum_rows")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [0])]), opset_imports=[helper.make_opsetid("", 20)])
    model.write_bytes(proto.SerializeToString())
    return Case(build(ctx, "--dynamic-batch", "--batch", "1:8:32", model=model), USER,
                r"--dynamic-batch: node sum_rows \(ReduceSum\) pins the batch",
                fix=lambda: build(ctx, model=model))


@case("model_external_data_missing")
def _external_data_missing(ctx: Ctx) -> Case:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    proto = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="m")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])], [weight]),
        opset_imports=[helper.make_opsetid("", 20)])
    model = ctx.tmp / "ext" / "m.onnx"
    model.parent.mkdir()
    onnx.save(proto, model, save_as_external_data=True, location="m.data", size_threshold=0)
    data = (model.parent / "m.data").read_bytes()
    (model.parent / "m.data").unlink()
    return Case(build(ctx, model=model), USER, r"external data file\(s\) \['m\.data'\], which are not beside it",
                fix=lambda: ((model.parent / "m.data").write_bytes(data), None)[1])


@case("model_is_dev_zero")
def _model_is_dev_zero(ctx: Ctx) -> Case:
    return Case(build(ctx, model=Path("/dev/zero")), USER, r"/dev/zero is not a regular file", fix=lambda: build(ctx))


@case("calib_ids_out_of_range")
def _calib_ids_out_of_range(ctx: Ctx) -> Case:
    import numpy as np
    from onnx import numpy_helper

    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((10, 8)).astype(np.float32), "table")
    weight = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32), "w")
    model = ctx.write("emb.onnx", helper.make_model(helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
         helper.make_node("MatMul", ["e", "w"], ["h"], name="proj"),
         helper.make_node("Relu", ["h"], ["y"], name="act")], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 5, 8])], [table, weight]),
        opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    ids = ctx.tmp / "ids.npy"
    np.save(ids, np.full((24, 5), 50, np.int64))
    return Case(build(ctx, "--precision", "int8", "--allow-unaccelerated", "--calib", str(ids), model=model), USER,
                r"calibration input 'ids' holds index 50, and node 'embed' \(Gather\) looks it up in a table of 10 rows",
                fix=lambda: (np.save(ids, np.random.default_rng(0).integers(0, 10, (24, 5))), None)[1])


for _value in ("nan", "inf"):
    def _prune(ctx: Ctx, value: str = _value) -> Case:
        cache = ctx.tmp / "cache"
        return Case(["cache", "prune", "--cache-dir", str(cache), "--max-mb", value], USER,
                    rf"--max-mb {value}: give 0 or more, a finite number",
                    fix=lambda: ["cache", "prune", "--cache-dir", str(cache), "--max-mb", "0"])
    CASES[f"cache_prune_{_value}"] = _prune


@case("sidecar_nested_too_deep")
def _sidecar_nested_too_deep(ctx: Ctx) -> Case:
    sidecar = ctx.art()
    good = sidecar.read_text()
    sidecar.write_text(good.rstrip().rstrip("}") + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return Case(["inspect", str(sidecar)], USER, r"is not valid JSON \(nested too deeply to read\)",
                fix=lambda: (sidecar.write_text(good), None)[1])


@case("check_inputs_corrupt_npz")
def _check_inputs_corrupt_npz(ctx: Ctx) -> Case:
    sidecar = ctx.art()
    bad = ctx.write("inputs.npz", b"PK\x03\x04 not really a zip")
    argv = ["check", str(sidecar), "--route", "onnxruntime", "--samples", "2"]
    return Case([*argv, "--inputs", str(bad)], USER, r"inputs\.npz is not a readable \.npz of arrays",
                fix=lambda: argv)


# -- SIGTERM (docker stop, systemd, timeout): the same clean-up as Ctrl-C, no $TMPDIR/trtforge-* left ---------
for _stage, _function in [("capture", "trtforge.pipeline.onnx_path:_capture"), ("passes", "trtforge.passes.process:process"),
                          ("build_running", "trtforge.builder.progress:BuildProgress.phase_start")]:
    def _sigterm(ctx: Ctx, function: str = _function) -> Case:
        return Case(build(ctx, "--batch", "1:3:6"), EXIT_CANCELLED, r"terminated \(SIGTERM\)|cancelled",
                    sigint_at=f"{function}@SIGTERM", cache=ctx.tmp / "cache")
    CASES[f"sigterm_{_stage}"] = _sigterm
    PROCESS_CASES.add(f"sigterm_{_stage}")
