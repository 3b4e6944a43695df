"""Issue 35 item 1: the line a trtforge bug ends with stays short. onnx_ir's copy error held the whole graph
(about 37 kB on one ``error:`` line); the traceback keeps the message, the line repeats at most 400 characters."""

from __future__ import annotations

import pytest
import typer

from trtforge.cli.app import BUG_LINE, BUG_LINE_CHARS, guarded


def test_a_bug_line_is_bounded_and_the_traceback_keeps_the_message(capsys):
    graph = "Graph(" + "node, " * 6000 + ")"  # a message the size of the one seen on Faster R-CNN

    @guarded
    def command() -> None:
        raise ValueError(f"Value 'r/shape_1' used by node {graph} is an outer-scope value")

    with pytest.raises(typer.Exit) as exit_info:
        command()
    assert exit_info.value.exit_code == 1
    err = capsys.readouterr().err
    error_line = next(line for line in err.splitlines() if line.startswith("error: "))
    assert error_line.startswith("error: ValueError: Value 'r/shape_1' used by node Graph(")
    assert len(error_line) < BUG_LINE_CHARS + 100 and "more characters in the traceback above" in error_line
    assert graph in err.replace("\n", "")  # the traceback still has all of it
    assert err.rstrip().endswith(BUG_LINE)
