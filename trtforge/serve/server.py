"""``trtforge.serve``: a real Triton Inference Server on this machine, one model per artifact.

The server process is the ``tritonserver`` binary from ``nvidia-pytriton``; each model is a
Python-backend model (``trtforge.serve.backend``) whose stub process runs the engine through a
trtforge route, so several instances run in separate processes without a shared GIL. Triton does
the HTTP/gRPC endpoints, the dynamic batcher, health endpoints and metrics.

Hot swap is Triton's own model reload, behind an admin token: the new model loads beside the old
one (sha256 verified, warmed up), Triton switches to it when it is ready and the old one finishes
its in-flight requests; a new artifact that fails to load leaves the old one serving.

Example:
    >>> with trtforge.serve(["out/mlp.json"], route="onnxruntime", admin_token="s3cret") as server:
    ...     server.reload("mlp", "out/mlp_v2.json", token="s3cret")
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtforge.core.errors import InvalidArgument, NotPermitted, Unsupported, UserError
from trtforge.serve.health import HealthPolicy

log = logging.getLogger(__name__)

#: The admin token's environment variable (``--admin-token`` wins).
ADMIN_TOKEN_VARIABLE = "TRTFORGE_ADMIN_TOKEN"
#: The HTTP header that carries the admin token.
ADMIN_HEADER = "admin-key"
#: The artifact watcher's polling interval must lie in this range (seconds).
WATCH_BOUNDS: tuple[float, float] = (0.1, 3600.0)
#: TCP ports a server may listen on.
PORT_RANGE: tuple[int, int] = (1, 65535)


def free_ports(count: int = 3, host: str = "127.0.0.1") -> list[int]:
    """Ports the kernel hands out on ``host`` now (closed again before tritonserver binds them), for
    servers that must not collide with another on this machine (tests, benchmarks).

    Example:
        >>> http, grpc, metrics = free_ports()
        >>> ServeConfig(http_port=http, grpc_port=grpc, metrics_port=metrics)
    """
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]


def check_devices(devices: Sequence[int], available: int, option: str = "devices") -> tuple[int, ...]:
    """``devices`` when every index names a GPU of this machine (``available`` of them), else one line.

    Example:
        >>> check_devices((0, 1), available=1, option="--devices")
        InvalidArgument: --devices 0,1 names GPU 1, but this machine has 1 GPU (0); name GPUs from 0 to 0
    """
    devices = tuple(int(d) for d in devices)
    if len(set(devices)) != len(devices) or any(d < 0 for d in devices):
        raise InvalidArgument(f"{option} {','.join(map(str, devices))} repeats a GPU or has a negative index; "
                              "name each GPU once, like 0,1")
    missing = [d for d in devices if d >= available]
    if missing:
        have = f"{available} GPU{'s' if available != 1 else ''}" + (f" (0..{available - 1})" if available else "")
        fix = f"name GPUs from 0 to {available - 1}" if available else f"drop {option} to serve on the CPU"
        raise InvalidArgument(f"{option} {','.join(map(str, devices))} names GPU {missing[0]}, but this machine "
                              f"has {have}; {fix}")
    return devices


#: Python-backend parameter: inputs may stay on the GPU (CUDA shared memory), taken through DLPack.
GPU_INPUTS = {"FORCE_CPU_ONLY_INPUT_TENSORS": "no"}


class ServerFailed(Unsupported):
    """tritonserver did not start, or stopped; the message carries the end of its log."""


class SwapRefused(InvalidArgument):
    """A reload was refused (bad token, or the new artifact failed to load); the old model serves on."""


@dataclass(frozen=True)
class ServeConfig:
    """Everything ``serve`` needs besides the artifacts; the CLI's options are these fields."""

    route: str = "onnxruntime"
    fallback_route: str | None = None
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    max_delay_ms: float = 2.0
    instances: int = 1
    devices: tuple[int, ...] = ()
    admin_token: str | None = None
    health: HealthPolicy = field(default_factory=HealthPolicy)
    allow_host_code: bool = False
    trust_factory: bool = False
    engine_factory: str | None = None
    startup_timeout_s: float = 180.0
    stub_env: Path | None = None
    input_format: str = "native"
    watch_s: float | None = None
    allow_signature_change: bool = False

    def __post_init__(self) -> None:
        from trtforge.serve.frames import check_input_format

        check_input_format(self.input_format)
        ports = {"http": self.http_port, "grpc": self.grpc_port, "metrics": self.metrics_port}
        for name, port in ports.items():
            if not PORT_RANGE[0] <= port <= PORT_RANGE[1]:
                raise InvalidArgument(f"--{name}-port {port} is not a TCP port; give one from {PORT_RANGE[0]} to "
                                      f"{PORT_RANGE[1]}")
        if len(set(ports.values())) != len(ports):
            raise InvalidArgument(f"the HTTP, gRPC and metrics ports must differ (given {list(ports.values())}); "
                                  "give --http-port, --grpc-port and --metrics-port three different ports")
        if self.watch_s is not None and not WATCH_BOUNDS[0] <= self.watch_s <= WATCH_BOUNDS[1]:
            raise InvalidArgument(f"watch interval {self.watch_s:g} s is outside {WATCH_BOUNDS[0]:g}.."
                                  f"{WATCH_BOUNDS[1]:g} s; pick a polling interval in that range")

    def model_parameters(self, sha256: str | None = None) -> dict[str, str]:
        import trtforge

        params = {"route": self.route, "trtforge_path": str(Path(trtforge.__file__).resolve().parents[1]),
                  "allow_host_code": "true" if self.allow_host_code else "false",
                  "interval_s": str(self.health.interval_s), "timeout_s": str(self.health.timeout_s),
                  "fallback_after": str(self.health.fallback_after),
                  "recover_after": str(self.health.recover_after), **GPU_INPUTS}
        if self.fallback_route:
            params["fallback_route"] = self.fallback_route
        if self.input_format != "native":
            params["input_format"] = self.input_format
        if self.engine_factory:
            params["engine_factory"] = self.engine_factory
        if self.trust_factory:  # a PyTorch route may import the sidecar's factory from the user's own module
            from trtforge.serve.environment import factory_path

            params.update(trust_factory="true", factory_path=factory_path())
        if sha256:
            params["sha256"] = sha256
        return params


def check_ports_free(config: ServeConfig) -> None:
    """One line when a port the server would listen on is taken on ``config.host`` (checked before
    anything starts; tritonserver itself would only say so deep in its log)."""
    for name, port in (("http", config.http_port), ("grpc", config.grpc_port), ("metrics", config.metrics_port)):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((config.host, port))
            except OSError as exc:
                raise InvalidArgument(f"--{name}-port {port} on {config.host} is taken ({exc.strerror}); stop what "
                                      f"listens there or give another --{name}-port") from None


def triton_command(server: Path, repo: Path, backends: Path, config: ServeConfig, restricted: str,
                   gpus: int) -> list[str]:
    """tritonserver's command line; GPU metrics on where there is a GPU (``gpus`` > 0).

    Example:
        >>> "--allow-gpu-metrics=true" in triton_command(server, repo, backends, ServeConfig(), "...", gpus=1)
        True
    """
    c = config
    return [
        str(server), f"--model-repository={repo}", f"--backend-directory={backends}",
        f"--http-address={c.host}", f"--grpc-address={c.host}", f"--metrics-address={c.host}",
        f"--http-port={c.http_port}", f"--grpc-port={c.grpc_port}", f"--metrics-port={c.metrics_port}",
        "--model-control-mode=explicit", "--load-model=*", "--exit-timeout-secs=5",
        f"--allow-gpu-metrics={'true' if gpus > 0 else 'false'}", f"--http-restricted-api={restricted}",
        f"--grpc-restricted-protocol={restricted}", "--log-verbose=0",
    ]


def load_failure(log_text: str) -> str | None:
    """Why a model failed to load, from tritonserver's log (the first such line, without the
    traceback Triton appends), or None.

    Example:
        >>> load_failure('E1201 ... model_lifecycle.cc:642] "failed to load \'m\' version 1: Internal: boom\\n\\nAt: ..."')
        "model 'm' failed to load: boom"
    """
    import re

    found = re.search(r"failed to load '([^']+)' version \d+: (?:Internal: )?(.*?)(?:\\n|\"?\s*$)", log_text, re.M)
    return f"model {found.group(1)!r} failed to load: {found.group(2).strip()}" if found else None


def signature(config: dict[str, Any]) -> tuple:
    """What clients depend on in a model config: batched or not, and each input's and output's
    name, data type and dims (Triton's JSON or ``repository.config_dict``'s)."""
    def tensors(key: str) -> tuple:
        return tuple((t["name"], t.get("data_type", ""), tuple(int(d) for d in t.get("dims", ())))
                     for t in config.get(key, ()))

    return int(config.get("max_batch_size", 0)) > 0, tensors("input"), tensors("output")


def _describe(sig: tuple) -> str:
    from trtforge.serve.repository import TRITON_DTYPES

    names = {v: k for k, v in TRITON_DTYPES.items()}
    batched, inputs, outputs = sig

    def one(t: tuple) -> str:
        return f"{t[0]} {names.get(t[1], t[1])} {list(t[2])}"

    return (f"inputs [{', '.join(map(one, inputs))}] outputs [{', '.join(map(one, outputs))}]"
            + ("" if batched else " (no batch axis)"))


def _http(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None,
          timeout: float = 5.0) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our loopback URL
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def endpoints_ready(http_url: str, metrics_url: str) -> bool:
    """Whether Triton says it is ready on ``http_url`` **and** its metrics endpoint answers: tritonserver
    opens the metrics port after the HTTP one, so a server ready by HTTP alone could still refuse the
    first ``status()`` (which reads our metrics) for a moment on a loaded machine.

    Example:
        >>> endpoints_ready("http://127.0.0.1:8000", "http://127.0.0.1:8002/metrics")
        True
    """
    with contextlib.suppress(OSError):
        return (_http(f"{http_url}/v2/health/ready", timeout=2)[0] == 200
                and _http(metrics_url, timeout=2)[0] == 200)
    return False


class Server:
    """A running tritonserver serving ``artifacts``; a context manager that stops it on exit."""

    def __init__(self, artifacts: Sequence[str | Path], config: ServeConfig | None = None,
                 *, repository: str | Path | None = None) -> None:
        from trtforge.core.machine import cuda_device_count
        from trtforge.serve.environment import find_triton, require_stub_env

        self.config = config or ServeConfig()
        if not artifacts and repository is None:
            raise InvalidArgument("serve needs at least one artifact (a sidecar .json or its .engine)")
        if self.config.devices:
            check_devices(self.config.devices, cuda_device_count(), "devices")
        self._dist = find_triton()
        self._stub_env = require_stub_env(self.config.stub_env)
        self._check_routes(artifacts)
        self._token = self.config.admin_token or os.environ.get(ADMIN_TOKEN_VARIABLE) or secrets.token_hex(32)
        self._artifacts = [Path(a) for a in artifacts]
        self._repository = Path(repository) if repository is not None else None
        self._stack = contextlib.ExitStack()
        self._process: subprocess.Popen[bytes] | None = None
        self.models: list[str] = []
        self._swap_metrics = _swap_metrics()
        self._watching = threading.Event()
        #: What the artifact watcher did: {"model", "artifact", "sha256", "ok", "reason"} per reload it tried.
        self.watch_events: list[dict[str, Any]] = []
        if self.config.watch_s is not None and repository is not None:
            raise InvalidArgument("watching artifacts needs artifacts, not a ready-made repository; drop the watch")

    def _check_routes(self, artifacts: Sequence[str | Path]) -> None:
        """One line for a route that cannot run an artifact on this machine, before Triton starts (a
        configured engine factory decides for itself)."""
        from trtforge.core.sidecar import read_sidecar
        from trtforge.runtime.load import route_refusal, untrusted_factory

        if self.config.engine_factory:
            return
        for artifact in artifacts:
            sidecar = read_sidecar(Path(artifact))
            for route in filter(None, (self.config.route, self.config.fallback_route)):
                reason = route_refusal(sidecar, route) or untrusted_factory(sidecar, route, self.config.trust_factory)
                if reason:
                    raise Unsupported(f"cannot serve {sidecar.name} here: {reason}")

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Server:
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Server:
        """Write the repository, start tritonserver and wait (bounded) until every model is ready."""
        try:
            check_ports_free(self.config)
            work = self._work = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="trtforge-serve-")))
            repo = self._repository or self._write_repository(work / "models")
            backends = work / "backends"
            shutil.copytree(self._dist.backends, backends)
            shutil.copy2(self._dist.stub(), backends / "python" / "triton_python_backend_stub")
            self._log = work / "tritonserver.log"
            self._launch(repo, backends, work)
            self._wait_ready()
            self._hidden.forget()
            if self.config.watch_s is not None:
                self._start_watcher()
        except BaseException:
            self.stop()
            raise
        return self

    def _write_repository(self, repo: Path) -> Path:
        from trtforge.serve.repository import plan_model, write_model

        repo.mkdir(parents=True)
        for artifact in self._artifacts:
            plan = plan_model(artifact, self._parameters(artifact))
            write_model(repo, plan, "python", copy_artifact=False, instances=self.config.instances,
                        max_delay_ms=self.config.max_delay_ms, devices=self.config.devices)
            self.models.append(plan.name)
        if len(set(self.models)) != len(self.models):
            raise InvalidArgument(f"two artifacts share a model name ({self.models}); serve them separately")
        return repo

    def _parameters(self, artifact: Path, sha256: str | None = None) -> dict[str, str]:
        from trtforge.core.sidecar import read_sidecar

        sidecar = read_sidecar(artifact)
        return dict(self.config.model_parameters(sha256), artifact=str(sidecar.path.resolve()),
                    EXECUTION_ENV_PATH=str(self._stub_env))

    def _launch(self, repo: Path, backends: Path, work: Path) -> None:
        from trtforge.core.machine import cuda_device_count
        from trtforge.serve.environment import server_environment
        from trtforge.serve.secrets_file import hide_token

        self._hidden = hide_token(work, self._token)  # a 0600 file, never the command line
        restricted = self._hidden.argument(f"model-repository:{ADMIN_HEADER}=")
        command = triton_command(self._dist.server, repo, backends, self.config, restricted, cuda_device_count())
        log = self._stack.enter_context(open(self._log, "wb"))
        self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                         env=server_environment(self._dist) | self._hidden.environment,
                                         start_new_session=True, preexec_fn=_die_with_parent)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                self._process = None
                with contextlib.suppress(OSError):
                    reason = load_failure(self._log.read_text(errors="replace"))
                    if reason:
                        raise ServerFailed(f"tritonserver could not start: {reason}")
                raise ServerFailed(f"tritonserver exited during startup:\n{self.log_tail()}")
            if endpoints_ready(self.url("http"), self.endpoints["metrics"]):
                self.models = self.models or self._repository_models()
                return
            time.sleep(0.2)
        raise ServerFailed(f"tritonserver was not ready after {self.config.startup_timeout_s:g} s:\n{self.log_tail()}")

    def _repository_models(self) -> list[str]:
        return sorted(p.parent.name for p in self._repository.glob("*/config.pbtxt")) if self._repository else []

    def stop(self) -> None:
        """Stop tritonserver (SIGTERM, then SIGKILL after the exit timeout) and delete the work folder."""
        self._watching.set()
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait(timeout=10)
        self._stack.close()

    # -- queries and admin -----------------------------------------------------------------
    def url(self, protocol: str) -> str:
        c = self.config
        port = {"http": c.http_port, "grpc": c.grpc_port, "metrics": c.metrics_port}[protocol]
        return f"{c.host}:{port}" if protocol == "grpc" else f"http://{c.host}:{port}"

    @property
    def endpoints(self) -> dict[str, str]:
        return {p: self.url(p) for p in ("http", "grpc", "metrics")} | {"metrics": self.url("metrics") + "/metrics"}

    def served(self) -> dict[str, str]:
        """Model → what runs it (``backend.served_line``): the route, and the ONNX file the onnxruntime route runs."""
        from trtforge.core.sidecar import read_sidecar
        from trtforge.serve.backend import served_line

        routes = (self.config.route, self.config.fallback_route or "")
        return {sidecar.name: served_line(sidecar, routes) for sidecar in map(read_sidecar, self._artifacts)}

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def metrics_text(self) -> str:
        """Triton's Prometheus metrics (ours included: trtforge_*) and the server's swap counters."""
        from prometheus_client import generate_latest

        _, text = _http(self.endpoints["metrics"], timeout=5)
        return text + generate_latest(self._swap_metrics[0]).decode()

    def status(self, model: str) -> dict[str, Any]:
        """{"state", "ready", "degraded", "route", "reason"} for ``model``, from readiness and our metrics.

        ``state`` is "ready", "degraded" (ready, but the fallback route serves; ``reason`` says why)
        or "unavailable". Triton's own ``/v2/health/ready`` and ``/v2/models/<m>/ready`` stay 200
        while degraded (the fallback answers correctly): they carry no reason.
        """
        from prometheus_client.parser import text_string_to_metric_families

        ready = _http(f"{self.url('http')}/v2/models/{model}/ready", timeout=5)[0] == 200
        state: dict[str, Any] = {"ready": ready, "degraded": False, "route": None, "reason": ""}
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                if sample.labels.get("model") != model or sample.value != 1:
                    continue
                if sample.name == "trtforge_degraded":
                    state["degraded"] = True
                if sample.name == "trtforge_active_route":
                    state["route"] = sample.labels["route"]
                if sample.name == "trtforge_degraded_reason":
                    state["reason"] = sample.labels["reason"]
        state["state"] = ("degraded" if state["degraded"] else "ready") if ready else "unavailable"
        return state

    def reload(self, model: str, artifact: str | Path, *, token: str | None,
               sha256: str | None = None, timeout_s: float = 300.0, allow_signature_change: bool = False) -> None:
        """Hot-swap ``model`` to ``artifact``: needs the admin token; raises SwapRefused on failure.

        An artifact whose inputs or outputs (name, dtype, dims, batch axis) differ from the served
        model's is refused, since every client would then fail, unless ``allow_signature_change``
        (or the config's) says the clients change too.
        """
        from trtforge.serve.repository import config_dict, config_json, plan_model

        swaps, failures = self._swap_metrics[1:]
        if not token:
            raise NotPermitted("reload needs the admin token (--admin-token or $TRTFORGE_ADMIN_TOKEN)")
        if model not in self.models:
            raise InvalidArgument(f"no model {model!r} is served here; reload one of {self.models}")
        plan = plan_model(artifact, self._parameters(Path(artifact), sha256))
        if plan.name != model:
            plan = type(plan)(model, plan.sidecar, plan.inputs, plan.outputs, plan.max_batch_size,
                              plan.preferred_batch_sizes, plan.parameters)
        planned = config_dict(plan, "python", instances=self.config.instances,
                              max_delay_ms=self.config.max_delay_ms, devices=self.config.devices)
        if not (allow_signature_change or self.config.allow_signature_change):
            self._check_signature(model, artifact, planned)
        config = config_json(planned)
        body = json.dumps({"parameters": {"config": config}}).encode()
        code, text = _http(f"{self.url('http')}/v2/repository/models/{model}/load", data=body,
                           headers={ADMIN_HEADER: token, "Content-Type": "application/json"}, timeout=timeout_s)
        if code != 200:
            failures.labels(model=model).inc()
            raise SwapRefused(f"reload of {model!r} to {artifact} refused (HTTP {code}): {text.strip()}; "
                              "the old model is still serving")
        swaps.labels(model=model).inc()

    def _check_signature(self, model: str, artifact: str | Path, planned: dict[str, Any]) -> None:
        code, text = _http(f"{self.url('http')}/v2/models/{model}/config", timeout=10)
        if code != 200:
            return  # nothing served to compare with: the load itself decides
        served, new = signature(json.loads(text)), signature(planned)
        if served != new:
            self._swap_metrics[2].labels(model=model).inc()
            raise SwapRefused(f"reload of {model!r} to {artifact} refused: it has {_describe(new)}, the served model "
                              f"{_describe(served)}, so clients would fail; pass allow_signature_change=True "
                              "(--allow-signature-change) if they change too. The old model is still serving")

    # -- artifact watcher --------------------------------------------------------------------
    def _start_watcher(self) -> None:
        self._watching.clear()
        looks = {model: _look(artifact) for model, artifact in zip(self.models, self._artifacts, strict=True)}
        seen, served = {m: look[0] for m, look in looks.items()}, {m: look[1] for m, look in looks.items()}
        thread = threading.Thread(target=self._watch, args=(seen, served), daemon=True, name="trtforge-watch")
        thread.start()
        self._stack.callback(thread.join, 10)

    def _watch(self, seen: dict[str, tuple[int, ...]], served: dict[str, str | None]) -> None:
        """Every ``watch_s``: a sidecar whose mtime or size changed, naming another engine sha256, is
        reloaded through ``reload`` (sha verified, warmed up, atomic switch; refused: the old one serves)."""
        while not self._watching.wait(self.config.watch_s):
            for model, artifact in zip(self.models, self._artifacts, strict=True):
                stamp, sha256 = _look(artifact)
                if stamp == seen[model] or sha256 is None:  # missing or half written: look again at the next tick
                    continue
                seen[model] = stamp
                if sha256 != served[model]:
                    event = self._watched_reload(model, artifact, sha256)
                    self.watch_events.append(event)
                    if event["ok"]:  # refused: tried again when the sidecar or its engine changes
                        served[model] = sha256

    def _watched_reload(self, model: str, artifact: Path, sha256: str) -> dict[str, Any]:
        event = {"model": model, "artifact": str(artifact), "sha256": sha256, "ok": True, "reason": ""}
        try:
            self.reload(model, artifact, token=self._token, sha256=sha256)
            log.warning("trtforge serve: %s reloaded from %s (engine sha256 %s)", model, artifact, sha256[:12])
        except UserError as exc:
            event.update(ok=False, reason=str(exc))
            log.error("trtforge serve: %s", exc)
        return event


def _look(path: Path) -> tuple[tuple[int, ...], str | None]:
    """((mtime ns, size) of the sidecar and of its engine file, the engine sha256 it records).

    The sha256 is None while the sidecar is missing or half written; a missing file stats (0, -1).
    """
    from trtforge.core.sidecar import read_sidecar

    def stat(file: Path) -> tuple[int, int]:
        try:
            found = file.stat()
        except OSError:
            return 0, -1
        return found.st_mtime_ns, found.st_size

    try:
        record = read_sidecar(path)
    except (UserError, OSError, ValueError):
        return stat(path), None
    return (*stat(path), *stat(path.parent / record.engine_file)), record.engine_sha256


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the thread that started it dies (a killed ``serve``
    leaves no tritonserver behind). Linux's PR_SET_PDEATHSIG; elsewhere nothing."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _swap_metrics() -> tuple[Any, Any, Any]:
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    swaps = Counter("trtforge_swaps", "hot swaps that took effect", ["model"], registry=registry)
    failures = Counter("trtforge_swap_failures", "hot swaps refused (old model kept)", ["model"],
                       registry=registry)
    return registry, swaps, failures


def serve(artifacts: Sequence[str | Path], *, route: str = "onnxruntime", fallback_route: str | None = None,
          host: str = "127.0.0.1", http_port: int = 8000, grpc_port: int = 8001, metrics_port: int = 8002,
          max_delay_ms: float = 2.0, **options: Any) -> Server:
    """Start serving ``artifacts`` on Triton; returns the running ``Server`` (use it with ``with``).

    ``options`` are the other ``ServeConfig`` fields (``instances``, ``admin_token``, ``health``,
    ``allow_host_code``, ...).

    Example:
        >>> with trtforge.serve(["out/mlp.json"], route="onnxruntime") as server:
        ...     print(server.endpoints)
    """
    config = ServeConfig(route=route, fallback_route=fallback_route, host=host, http_port=http_port,
                         grpc_port=grpc_port, metrics_port=metrics_port, max_delay_ms=max_delay_ms, **options)
    return Server(artifacts, config).start()
