"""A failed or interrupted build leaves no empty output folder of its own (issue 35, item 14), and never removes
a folder that existed before it."""

from __future__ import annotations

import numpy as np
import pytest
from cli_in_process import run

import trtforge


def _interrupt():
    raise KeyboardInterrupt  # Ctrl-C while the calibration data is read: inside the build, after validation


def test_interrupted_build_removes_the_folders_it_made(tiny_onnx, tmp_path):
    out = tmp_path / "new" / "deeper" / "out"
    with pytest.raises(KeyboardInterrupt):
        trtforge.compile(tiny_onnx, precision="int8", calibration_data=_interrupt, allow_unaccelerated=True,
                         output_dir=out, progress=False)
    assert not (tmp_path / "new").exists()


def test_failed_cli_build_removes_its_folder_and_keeps_one_that_existed(tiny_onnx, tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((24, 3, 8, 8), np.float32))  # tiny.onnx takes 16×16 images
    argv = ["build", tiny_onnx, "--precision", "int8", "--allow-unaccelerated", "--calib", tmp_path / "bad.npy", "-q"]
    done = run([*argv, "-o", tmp_path / "made" / "out"], cwd=tmp_path)
    assert done.returncode == 2 and "calibration input" in done.stderr, done.stderr
    assert not (tmp_path / "made").exists()
    (tmp_path / "mine").mkdir()  # the user's own (empty) folder
    done = run([*argv, "-o", tmp_path / "mine" / "out"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert (tmp_path / "mine").is_dir() and not (tmp_path / "mine" / "out").exists()
    (tmp_path / "kept").mkdir()
    done = run([*argv, "-o", tmp_path / "kept"], cwd=tmp_path)
    assert done.returncode == 2 and (tmp_path / "kept").is_dir()
