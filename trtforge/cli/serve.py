"""``trtforge serve`` and ``trtforge export triton``: serving on Triton Inference Server.

Example:
    $ trtforge serve out/mlp.json --route onnxruntime --admin-token "$TOKEN"
    $ trtforge export triton out/lite0_fp16.json --repo models/
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from trtforge.cli.app import console, err_console
from trtforge.cli.app import guarded as user_errors
from trtforge.core.errors import UserError

export_app = typer.Typer(no_args_is_help=True, help="Export artifacts for other servers.")


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``export triton`` to the ``trtforge`` command."""
    app.command("serve")(serve_command)
    app.add_typer(export_app, name="export")


def _devices(text: str | None, *, check: bool = True) -> tuple[int, ...]:
    """``--devices 0,1`` → (0, 1); with ``check``, every index must name a GPU of this machine."""
    from trtforge.core.errors import InvalidArgument

    if not text:
        return ()
    try:
        devices = tuple(int(d) for d in text.split(","))
    except ValueError as exc:
        raise InvalidArgument(f"--devices {text!r}: give GPU indices like 0,1") from exc
    if not check:
        return devices
    from trtforge.core.machine import cuda_device_count
    from trtforge.serve.server import check_devices

    return check_devices(devices, cuda_device_count(), "--devices")


@user_errors
def serve_command(
    artifacts: Annotated[list[Path], typer.Argument(help="sidecars (.json) or engines, one model each")],
    route: Annotated[str, typer.Option(help="trtforge route that runs each model; auto: the one trtforge tune chose on this device")] = "onnxruntime",
    fallback_route: Annotated[str | None, typer.Option(help="route used while health checks fail")] = None,
    host: Annotated[str, typer.Option(help="address to listen on (loopback unless you say otherwise)")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option()] = 8000,
    grpc_port: Annotated[int, typer.Option()] = 8001,
    metrics_port: Annotated[int, typer.Option()] = 8002,
    max_delay_ms: Annotated[float, typer.Option(help="dynamic batcher's longest wait")] = 2.0,
    instances: Annotated[int, typer.Option(help="model instances (separate processes) per model")] = 1,
    devices: Annotated[str | None, typer.Option(help="GPU indices for the instances, e.g. 0,1")] = None,
    admin_token: Annotated[str | None, typer.Option(envvar="TRTFORGE_ADMIN_TOKEN",
                                                    help="token for reloads (none: reloads refused)")] = None,
    allow_host_code: Annotated[bool, typer.Option(help="accept TensorRT engines with host code")] = False,
    trust_factory: Annotated[bool, typer.Option(help="PyTorch routes: import the sidecar's model factory from your "
                                                     "own module (current folder or PYTHONPATH); it runs its code")] = False,
    input_format: Annotated[str, typer.Option(help="native (the model's inputs) | uint8 (HWC frames, the "
                                                   "sidecar's preprocessing runs in the server)")] = "native",
    watch: Annotated[float | None, typer.Option(help="poll each sidecar every N seconds; a new engine "
                                                     "sha256 reloads it (old one kept on failure)")] = None,
    allow_signature_change: Annotated[bool, typer.Option(help="let reloads change a model's inputs or outputs "
                                                              "(refused by default: clients would fail)")] = False,
) -> None:
    """Serve artifacts on Triton Inference Server until Ctrl-C."""
    from trtforge.serve.server import ServeConfig, Server

    try:
        config = ServeConfig(route=route, fallback_route=fallback_route, host=host, http_port=http_port,
                             grpc_port=grpc_port, metrics_port=metrics_port, max_delay_ms=max_delay_ms,
                             instances=instances, devices=_devices(devices), admin_token=admin_token,
                             allow_host_code=allow_host_code, trust_factory=trust_factory,
                             input_format=input_format, watch_s=watch,
                             allow_signature_change=allow_signature_change)
        server = Server(artifacts, config)
        _run(server)
    except UserError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from exc


def _run(server) -> None:
    try:
        with server:
            from trtforge.serve.repository import instance_placement

            c = server.config
            placement = ", ".join(instance_placement(c.instances, c.devices))
            console.print(f"serving {', '.join(server.models)} (route {c.route}, input {c.input_format}; "
                          f"instances per model: {placement})")
            for model, line in server.served().items():
                console.print(f"  {escape(model)} {escape(line)}", highlight=False)
            for name, url in server.endpoints.items():
                console.print(f"  {name:8} {url}")
            console.print("Ctrl-C stops")
            while server.running:
                time.sleep(0.5)
            err_console.print(f"[bold red]tritonserver stopped:[/]\n{escape(server.log_tail())}")
            raise typer.Exit(1)
    except KeyboardInterrupt:
        console.print("stopped")


@export_app.command("triton")
@user_errors
def export_triton_command(
    artifacts: Annotated[list[Path], typer.Argument(help="sidecars (.json) or engines")],
    repo: Annotated[Path, typer.Option(help="model repository folder to write into")],
    backend: Annotated[str, typer.Option(help="tensorrt (model.plan) | python (a trtforge route)")] = "tensorrt",
    route: Annotated[str, typer.Option(help="python backend: the route that runs the model")] = "onnxruntime",
    instances: Annotated[int, typer.Option(help="instance_group count")] = 1,
    max_delay_ms: Annotated[float, typer.Option(help="dynamic batcher's longest wait")] = 2.0,
    stub_env: Annotated[Path | None, typer.Option(help="python backend: venv for the stub (EXECUTION_ENV_PATH)")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace model folders trtforge wrote before")] = False,
    matrix: Annotated[str | None, typer.Option(help="one model NAME from single-target engines "
                                                   "(cc_model_filenames)")] = None,
    devices: Annotated[str | None, typer.Option(help="GPU indices: --instances on each (instance_group "
                                                     "KIND_GPU gpus), e.g. 0,1")] = None,
    input_format: Annotated[str, typer.Option(help="python backend: native | uint8 (HWC frames, "
                                                   "preprocessed in the server)")] = "native",
) -> None:
    """Write a Triton model repository: one model per artifact."""
    from trtforge.serve.repository import export_triton

    try:
        folders = export_triton(artifacts, repo, backend=backend, route=route, instances=instances,
                                max_delay_ms=max_delay_ms, overwrite=overwrite, stub_env=stub_env,
                                matrix=matrix, devices=_devices(devices, check=False), input_format=input_format)
    except UserError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from exc
    for folder in folders:
        console.print(f"[green]wrote[/] {folder}/config.pbtxt")
