"""ONNX Runtime sessions follow OMP_NUM_THREADS as PyTorch does: one variable bounds a process's CPU threads."""

from __future__ import annotations

import pytest

from trtforge.core.ort_session import omp_threads, session


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("1", 1), (None, None), ("0", None), ("two", None),
                                                 ("", None)])
def test_omp_threads_reads_a_positive_count(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert omp_threads() == expected


def test_a_session_takes_its_threads_from_omp_num_threads_unless_given(monkeypatch, tiny_onnx):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert session(tiny_onnx).get_session_options().intra_op_num_threads == 3
    assert session(tiny_onnx, threads=2).get_session_options().intra_op_num_threads == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert session(tiny_onnx).get_session_options().intra_op_num_threads == 0  # ONNX Runtime's own default
