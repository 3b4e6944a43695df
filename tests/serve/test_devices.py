"""Serving across GPUs, what the CPU can check: instance groups (parsed by Triton's protobuf), the
device of each instance, and the refusal of GPUs this machine lacks."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.serve.test_export_and_cli import parse_config
from trtforge.cli import app
from trtforge.core.errors import InvalidArgument
from trtforge.core.machine import cuda_device_count
from trtforge.serve.backend import instance_device
from trtforge.serve.repository import export_triton, instance_group, instance_placement
from trtforge.serve.server import ServeConfig, Server, check_devices


def test_export_devices_writes_one_gpu_instance_group_per_listed_gpu(tmp_path, linear_v1):
    result = CliRunner().invoke(app, ["export", "triton", str(linear_v1), "--repo", str(tmp_path / "repo"),
                                      "--devices", "0,1"])
    assert result.exit_code == 0, result.output
    group = parse_config(tmp_path / "repo" / "linear" / "config.pbtxt").instance_group
    assert len(group) == 1 and group[0].count == 1 and list(group[0].gpus) == [0, 1]
    assert group[0].kind == group[0].KIND_GPU
    folder = export_triton([linear_v1], tmp_path / "py", backend="python", instances=2, devices=(1,))[0]
    group = parse_config(folder / "config.pbtxt").instance_group
    assert (group[0].count, list(group[0].gpus), group[0].kind) == (2, [1], group[0].KIND_GPU)


def test_instance_devices_follow_triton_instance_group_semantics():
    assert instance_group(2) == [{"count": 2, "kind": "KIND_CPU"}]
    assert instance_group(1, devices=(0, 1)) == [{"count": 1, "kind": "KIND_GPU", "gpus": [0, 1]}]
    assert instance_placement(1, (0, 1)) == ["cuda:0", "cuda:1"]
    assert instance_placement(2, (1,)) == ["cuda:1", "cuda:1"]
    assert instance_placement(3) == ["cpu"] * 3
    # what each stub makes of Triton's model_instance_kind / model_instance_device_id
    assert [instance_device("GPU", d) for d in ("0", "1")] == ["cuda:0", "cuda:1"]
    assert instance_device("CPU", 0) is None
    with pytest.raises(InvalidArgument, match="1 or more"):
        instance_group(0)


def test_devices_this_machine_lacks_are_refused_in_one_line(linear_v1):
    available = cuda_device_count()
    with pytest.raises(InvalidArgument, match=f"names GPU {available}, but this machine has {available} GPU"):
        check_devices((*range(available), available), available, "--devices")
    with pytest.raises(InvalidArgument, match="repeats a GPU"):
        check_devices((0, 0), 2)
    assert check_devices((0, 1), 2) == (0, 1)
    with pytest.raises(InvalidArgument, match="devices"):
        Server([linear_v1], ServeConfig(devices=tuple(range(available + 1))))
    result = CliRunner().invoke(app, ["serve", str(linear_v1), "--devices", ",".join(map(str, range(available + 2)))])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"--devices {','.join(map(str, range(available + 2)))} names GPU {available}" \
        in result.output, result.output
    assert "Traceback" not in result.output
