"""Every TensorRT name the route, the builder and refit use, read from the code itself (AST), exists in
each real binding: full TensorRT 10.x and 11.x (the newest ``tensorrt-cu12-bindings`` and
``tensorrt-cu13-bindings`` wheels ``make setup`` downloads; their ``tensorrt.so`` cannot be imported
here, its strings are read) and the installed TensorRT-RTX. A name the code feature-tests (hasattr,
getattr with a default) may be missing; any other missing name fails, naming the flavour. Keyword
arguments are checked against the docstring signatures (TensorRT-RTX) or the binary's argument names."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import trt_double
from trt_api_names import binary_names, code_names, module_names, problems

from trtforge.core import trt

PACKAGE = Path(trt.__file__).resolve().parents[1]
ROUTE = PACKAGE / "runtime" / "tensorrt_route.py"
SOURCES: tuple[Path, ...] = (ROUTE, PACKAGE / "refit.py", *sorted((PACKAGE / "builder").glob("*.py")))
#: Where ``make setup`` puts the bindings wheels (``pip download --no-deps``; never installed).
WHEELS = Path(sys.prefix) / "tensorrt-bindings"
#: flavour → (wheel name prefix, major version)
WHEEL_FLAVOURS: dict[str, tuple[str, int]] = {"tensorrt10": ("tensorrt_cu12_bindings", 10),
                                              "tensorrt11": ("tensorrt_cu13_bindings", 11)}


def _newest_wheel(prefix: str, major: int) -> Path | None:
    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", path.name.split("-")[1]))

    found = [p for p in WHEELS.glob(f"{prefix}-{major}.*.whl")]
    return max(found, key=version) if found else None


def _binding(flavour: str):
    if flavour == "tensorrt_rtx":
        pytest.importorskip("tensorrt_rtx")
        import tensorrt_rtx

        return module_names(tensorrt_rtx)
    wheel = _newest_wheel(*WHEEL_FLAVOURS[flavour])
    if wheel is None:
        pytest.skip(f"no {WHEEL_FLAVOURS[flavour][0]} {WHEEL_FLAVOURS[flavour][1]}.x wheel in {WHEELS}; run make setup")
    return binary_names(wheel)


@pytest.mark.parametrize("flavour", ["tensorrt10", "tensorrt11", "tensorrt_rtx"])
def test_every_tensorrt_name_the_code_uses_is_in_the_binding(flavour):
    uses, tested = code_names(SOURCES)
    found = problems(uses, tested, _binding(flavour))
    assert not found, "\n".join(found)


def test_the_scan_sees_the_routes_calls_and_feature_tests():
    uses, tested = code_names(SOURCES)
    names = {u.name for u in uses}
    assert {"execute_async_v3", "set_optimization_profile_async", "set_input_shape", "get_tensor_profile_values",
            "TensorIOMode", "INPUT", "deserialize_cuda_engine", "build_serialized_network", "set_named_weights",
            "parse_from_file", "num_io_tensors", "BuilderFlag", "VERSION_COMPATIBLE", "combine", "queryKeys"} <= names
    assert {"create_runtime_config", "cuda_graph_strategy", "engine_host_code_allowed"} <= tested
    assert "execute_async_v3" not in tested and "bindings" not in names  # the shim's own function is not TensorRT's
    assert "targets" not in names  # CompileConfig's, not TensorRT's


@pytest.mark.parametrize("flavour", ["tensorrt10", "tensorrt11", "tensorrt_rtx"])
def test_a_misspelt_method_or_keyword_in_a_scratch_route_fails_naming_the_flavour(flavour, tmp_path):
    """The test of the test: the same check over a copy of the route with one name misspelt."""
    binding = _binding(flavour)
    text = ROUTE.read_text()
    assert "context.execute_async_v3(stream)" in text
    scratch = tmp_path / "tensorrt_route.py"
    scratch.write_text(text.replace("context.execute_async_v3(stream)", "context.execute_async_v4(stream)"))
    found = problems(*code_names([scratch]), binding)
    assert len(found) == 1 and found[0].startswith(f"{binding.flavour}: no 'execute_async_v4' (tensorrt_route.py:")
    # A keyword argument: the real name passes, a misspelt one fails.
    scratch.write_text(text.replace("context.execute_async_v3(stream)", "context.execute_async_v3(stream_handle=stream)"))
    assert problems(*code_names([scratch]), binding) == []
    scratch.write_text(text.replace("context.execute_async_v3(stream)", "context.execute_async_v3(stream_handl=stream)"))
    found = problems(*code_names([scratch]), binding)
    assert found == [f"{binding.flavour}: execute_async_v3() has no argument 'stream_handl' "
                     f"({found[0].rsplit('(', 1)[-1]}"] if found else False, found
    assert "tensorrt" in binding.flavour  # the flavour is named: tensorrt_cu12_bindings 10.x, ... or tensorrt_rtx


def test_a_name_used_only_behind_hasattr_may_be_missing(tmp_path):
    text = ROUTE.read_text()
    scratch = tmp_path / "tensorrt_route.py"
    scratch.write_text(text + "\n\ndef _probe(engine):\n    if hasattr(engine, 'made_up_feature'):\n"
                              "        engine.made_up_feature()\n")
    binding = module_names(trt_double.FAKE_TRT)
    uses, tested = code_names([scratch])
    assert "made_up_feature" in {u.name for u in uses} and "made_up_feature" in tested
    assert not [p for p in problems(uses, tested, binding) if "made_up_feature" in p]


def test_the_double_covers_the_routes_runtime_names():
    """The double's classes offer every name the route calls (those it feature-tests too, for TensorRT-RTX)."""
    classes = [v for v in vars(trt_double).values() if isinstance(v, type) and v.__module__ == trt_double.__name__]
    offered = set().union(*(set(dir(c)) | set(getattr(c, "__members__", {})) for c in classes),
                          *(set(c.__init__.__code__.co_names) for c in classes if hasattr(c.__init__, "__code__")))
    offered |= set().union(*(dir(trt_double.flavour(name)) for name in trt_double.FLAVOURS))
    uses, _ = code_names([ROUTE])
    missing = sorted({u.name for u in uses if u.keyword is None} - offered)
    assert not missing, f"the double lacks {missing}, which the route uses"
