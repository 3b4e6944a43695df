"""A precision is one record (``core.precisions``): a made-up one is refused until every field is given and
agrees with its kind, and the modules that used to list precisions read theirs from the records."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from trtforge.core.errors import InvalidArgument
from trtforge.core.precisions import (
    FIELDS,
    QUANTIZED,
    RECORDS,
    WEIGHT_ONLY,
    Precision,
    Tolerance,
    names,
    record,
)

#: A made-up W4A8 precision, every field given.
MADE_UP = {"name": "w4a8", "kind": QUANTIZED, "compute_dtype": "float16", "activation_dtype": "int8",
           "weight_dtype": "int4", "block_size": 128, "scheme": "int8", "op_classes": ("gemm",), "placement": "w8a8",
           "label": "W4A8", "tolerance": Tolerance(0.3, 0.85, 0.97), "layer_threshold": 0.15, "paths": ("onnx",)}


def test_a_made_up_precision_with_every_field_is_a_record():
    made = Precision(**MADE_UP)
    assert made.quantized and not made.weight_only and set(FIELDS) == set(MADE_UP)


@pytest.mark.parametrize("missing", FIELDS)
def test_a_made_up_precision_without_a_field_is_refused(missing):
    given = {k: v for k, v in MADE_UP.items() if k != missing}
    with pytest.raises(TypeError, match=missing):
        Precision(**given)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("kind", "half", "kind: one of"),
    ("scheme", None, "names its weight_dtype, scheme"),
    ("placement", None, "names its weight_dtype, scheme"),
    ("activation_dtype", None, "W8A8 quantizes activations"),
    ("tolerance", {"rel_l2": 0.3}, "tolerance: a Tolerance"),
    ("layer_threshold", 0.0, "layer_threshold"),
    ("paths", ("tflite",), "paths: some of onnx, direct"),
    ("label", "", "label"),
])
def test_a_made_up_precision_that_contradicts_its_kind_is_refused(field, value, match):
    with pytest.raises(InvalidArgument, match=match):
        Precision(**{**MADE_UP, field: value})


def test_a_float_precision_quantizes_nothing():
    fp16 = asdict(record("fp16"))
    fp16["tolerance"] = record("fp16").tolerance
    with pytest.raises(InvalidArgument, match="quantizes nothing"):
        Precision(**{**fp16, "name": "fp12", "weight_dtype": "int8"})


def test_the_tables_derive_from_the_records():
    from trtforge.builder.capability import CLASSES_OF_SCHEME, SCHEME_OF_PRECISION
    from trtforge.core.config import FLOAT_OF_PRECISION, PRECISIONS, WEIGHT_ONLY_PRECISIONS
    from trtforge.debug.layerwise import LAYER_THRESHOLDS
    from trtforge.debug.tolerances import TOLERANCES, limit_for
    from trtforge.quantize.precision import SPECS

    assert PRECISIONS == tuple(p.name for p in RECORDS) == ("fp32", "fp16", "bf16", "int8", "fp8", "int8-wo",
                                                              "int4-wo")
    assert WEIGHT_ONLY_PRECISIONS == names(WEIGHT_ONLY) == ("int8-wo", "int4-wo")
    assert FLOAT_OF_PRECISION["bf16"] == "bfloat16" and FLOAT_OF_PRECISION["fp32"] is None
    assert SCHEME_OF_PRECISION["int8-wo"] == "int8_wo" and CLASSES_OF_SCHEME["int8_wo"] == ("gemm",)
    assert limit_for("fp32", "rel_l2") == 5e-3 and TOLERANCES["int4-wo"]["cosine"] == 0.98
    assert LAYER_THRESHOLDS["bf16"] == 5e-2
    assert [s.name for s in SPECS.values()] == ["INT8", "FP8", "INT8 weight-only", "INT4 weight-only"]
    assert SPECS["int4-wo"].block_size == 128 and [r for r, _ in SPECS["fp8"].rules] == ["fp8_min_channels_16",
                                                                                     "fp8_no_gemv"]
    assert names(path="direct") == ("fp32", "fp16", "bf16", "int8")


def test_an_unknown_precision_names_the_known_ones():
    with pytest.raises(InvalidArgument, match="unknown precision 'fp6'; choose one of fp32, fp16"):
        record("fp6")
