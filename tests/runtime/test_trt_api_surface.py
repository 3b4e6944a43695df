"""Every TensorRT attribute the TensorRT route uses exists on the installed bindings' classes."""

from __future__ import annotations

import pytest
import trt_double

from trtforge.core import trt
from trtforge.runtime.tensorrt_route import TRT_API_OPTIONAL, TRT_API_USED

pytestmark = pytest.mark.skipif(not trt.available(), reason="no TensorRT bindings installed")

# Names the double calls its classes by (the bindings' names on the left).
DOUBLE_CLASSES = {"Runtime": "FakeTrtRuntime", "ICudaEngine": "FakeTrtEngine",
                  "IExecutionContext": "FakeTrtContext", "IRuntimeConfig": "FakeRuntimeConfig",
                  "IRuntimeCache": "FakeRuntimeCache", "CudaGraphStrategy": "CudaGraphStrategy"}


@pytest.mark.parametrize("name", TRT_API_USED)
def test_route_attribute_exists_on_installed_bindings(name):
    if trt.missing([name]):
        pytest.fail(f"{trt.info().flavour} {trt.info().version} has no {name}, which the TensorRT route uses")


@pytest.mark.parametrize("name", TRT_API_OPTIONAL)
def test_optional_attributes_exist_on_this_flavour(name):
    # Optional for the route (feature-detected with hasattr), but TensorRT-RTX 1.7 offers them.
    if trt.info().flavour != "tensorrt_rtx":
        pytest.skip("checked on TensorRT-RTX only")
    trt.resolve(name)


@pytest.mark.parametrize("name", [n for n in TRT_API_USED + TRT_API_OPTIONAL
                                  if n.split(".")[0] in DOUBLE_CLASSES and "." in n])
def test_double_covers_the_same_surface(name):
    # The double exercises the same calls; a name the route adds must be added to the double too.
    cls, attr = name.split(".")
    double = getattr(trt_double, DOUBLE_CLASSES[cls])
    probe = (double.__dict__.get(attr) or attr in getattr(double, "__members__", {})
             or attr in double.__init__.__code__.co_names)
    assert probe, f"{DOUBLE_CLASSES[cls]} lacks {attr}"
