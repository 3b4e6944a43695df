"""ONNX's own operator tests through trtforge: one float32 case per op type (the CI sample: each op type's
first case by name, GRU's defaults case instead of its first; the full run is bench/conformance.py, results in
docs/conformance.md).

For every case: the processed FP32 graph equals the original in ONNX Runtime wherever ONNX Runtime runs
the original; the FP16 graph builds wherever the FP32 graph builds and stays within 1e-2 of the case's
expected outputs under the strict evaluator; every refusal is one line naming the op.
"""

from __future__ import annotations

import logging

import pytest

from trtforge.conformance.onnx_node import float32_cases, run_case

pytestmark = pytest.mark.slow  # one FP32 and one FP16 build per ONNX op type


#: GRU's first case, test_gru_batchwise (layout 1), costs TensorRT-RTX about 7 CPU s a build here, and it is built
#: three times (FP32, the FP16 op probe, FP16): 21 of the sample's 31 CPU s. Its defaults case builds in 0.1 s and
#: ONNX Runtime runs it, so GRU's FP32 equality is judged as well; layout 1 stays in the sample through
#: test_lstm_batchwise, LSTM's first case.
CASE_OF = {"GRU": "test_gru_defaults"}


def sample() -> list:
    """``float32_cases(per_op=1)`` with ``CASE_OF``'s case for the op types it names: one case per op type."""
    instead = {case.model.graph.node[0].op_type: case for case in float32_cases(ops=list(CASE_OF))
               if case.name in CASE_OF.values()}
    assert instead.keys() == CASE_OF.keys(), instead.keys()
    return [instead.get(case.model.graph.node[0].op_type, case) for case in float32_cases(per_op=1)]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    quiet = logging.getLogger("trtforge")  # the range probe's "skipped" lines; restored for later tests
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        work = tmp_path_factory.mktemp("conformance")
        yield [run_case(case, work) for case in sample()]
    finally:
        quiet.setLevel(level)


def test_the_sample_spans_the_op_types(results):
    assert len({r.op for r in results}) >= 100, len(results)
    built = [r for r in results if r.fp32_built]
    assert len(built) >= 0.4 * len(results), f"only {len(built)} of {len(results)} built at FP32"


def test_trtforge_breaks_nothing(results):
    broken = [f"{r.name}: {'; '.join(r.broken)}" for r in results if r.broken]
    assert not broken, "\n".join(broken)


def test_processed_fp32_graphs_equal_the_originals_where_ort_runs_them(results):
    judged = [r for r in results if r.fp32_equal is not None]
    assert len(judged) >= 0.7 * len(results)
    assert all(r.fp32_equal for r in judged), [r.name for r in judged if not r.fp32_equal]


def test_fp16_builds_wherever_fp32_builds_within_tolerance(results):
    for r in results:
        if r.fp32_built:
            assert r.fp16_built and r.fp16_error is not None and r.fp16_error <= 1e-2, r


def test_every_refusal_is_one_line_naming_the_op(results):
    refused = [r for r in results if r.refused]
    assert refused
    for r in refused:
        assert "\n" not in r.refused and r.op in r.refused, r.refused
