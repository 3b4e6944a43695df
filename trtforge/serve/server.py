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
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtforge.core.errors import InvalidArgument, NotPermitted, Unsupported
from trtforge.serve.health import HealthPolicy

#: The admin token's environment variable (``--admin-token`` wins).
ADMIN_TOKEN_VARIABLE = "TRTFORGE_ADMIN_TOKEN"
#: The HTTP header that carries the admin token.
ADMIN_HEADER = "admin-key"


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
    engine_factory: str | None = None
    startup_timeout_s: float = 180.0
    stub_env: Path | None = None

    def model_parameters(self, sha256: str | None = None) -> dict[str, str]:
        import trtforge

        params = {"route": self.route, "trtforge_path": str(Path(trtforge.__file__).resolve().parents[1]),
                  "allow_host_code": "true" if self.allow_host_code else "false",
                  "interval_s": str(self.health.interval_s), "timeout_s": str(self.health.timeout_s),
                  "fallback_after": str(self.health.fallback_after),
                  "recover_after": str(self.health.recover_after)}
        if self.fallback_route:
            params["fallback_route"] = self.fallback_route
        if self.engine_factory:
            params["engine_factory"] = self.engine_factory
        if sha256:
            params["sha256"] = sha256
        return params


def _http(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None,
          timeout: float = 5.0) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our loopback URL
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


class Server:
    """A running tritonserver serving ``artifacts``; a context manager that stops it on exit."""

    def __init__(self, artifacts: Sequence[str | Path], config: ServeConfig | None = None,
                 *, repository: str | Path | None = None) -> None:
        from trtforge.serve.environment import find_triton, require_stub_env

        self.config = config or ServeConfig()
        if not artifacts and repository is None:
            raise InvalidArgument("serve needs at least one artifact (a sidecar .json or its .engine)")
        self._dist = find_triton()
        self._stub_env = require_stub_env(self.config.stub_env)
        self._token = self.config.admin_token or os.environ.get(ADMIN_TOKEN_VARIABLE) or secrets.token_hex(32)
        self._artifacts = [Path(a) for a in artifacts]
        self._repository = Path(repository) if repository is not None else None
        self._stack = contextlib.ExitStack()
        self._process: subprocess.Popen[bytes] | None = None
        self.models: list[str] = []
        self._swap_metrics = _swap_metrics()

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Server:
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Server:
        """Write the repository, start tritonserver and wait (bounded) until every model is ready."""
        try:
            work = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="trtforge-serve-")))
            repo = self._repository or self._write_repository(work / "models")
            backends = work / "backends"
            shutil.copytree(self._dist.backends, backends)
            shutil.copy2(self._dist.stub(), backends / "python" / "triton_python_backend_stub")
            self._log = work / "tritonserver.log"
            self._launch(repo, backends)
            self._wait_ready()
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

    def _launch(self, repo: Path, backends: Path) -> None:
        from trtforge.serve.environment import server_environment

        c = self.config
        restricted = f"model-repository:{ADMIN_HEADER}={self._token}"
        command = [
            str(self._dist.server), f"--model-repository={repo}", f"--backend-directory={backends}",
            f"--http-address={c.host}", f"--grpc-address={c.host}", f"--metrics-address={c.host}",
            f"--http-port={c.http_port}", f"--grpc-port={c.grpc_port}", f"--metrics-port={c.metrics_port}",
            "--model-control-mode=explicit", "--load-model=*", "--exit-timeout-secs=5",
            "--allow-gpu-metrics=false", f"--http-restricted-api={restricted}",
            f"--grpc-restricted-protocol={restricted}", "--log-verbose=0",
        ]
        log = self._stack.enter_context(open(self._log, "wb"))
        self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=server_environment(self._dist),
                                         start_new_session=True, preexec_fn=_die_with_parent)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise ServerFailed(f"tritonserver exited during startup:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                if _http(f"{self.url('http')}/v2/health/ready", timeout=2)[0] == 200:
                    self.models = self.models or self._repository_models()
                    return
            time.sleep(0.2)
        raise ServerFailed(f"tritonserver was not ready after {self.config.startup_timeout_s:g} s:\n{self.log_tail()}")

    def _repository_models(self) -> list[str]:
        return sorted(p.parent.name for p in self._repository.glob("*/config.pbtxt")) if self._repository else []

    def stop(self) -> None:
        """Stop tritonserver (SIGTERM, then SIGKILL after the exit timeout) and delete the work folder."""
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
        """{"ready", "degraded", "route", "reason"} for ``model``, from readiness and the metrics."""
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
        return state

    def reload(self, model: str, artifact: str | Path, *, token: str | None,
               sha256: str | None = None, timeout_s: float = 300.0) -> None:
        """Hot-swap ``model`` to ``artifact``: needs the admin token; raises SwapRefused on failure."""
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
        config = config_json(config_dict(plan, "python", instances=self.config.instances,
                                         max_delay_ms=self.config.max_delay_ms, devices=self.config.devices))
        body = json.dumps({"parameters": {"config": config}}).encode()
        code, text = _http(f"{self.url('http')}/v2/repository/models/{model}/load", data=body,
                           headers={ADMIN_HEADER: token, "Content-Type": "application/json"}, timeout=timeout_s)
        if code != 200:
            failures.labels(model=model).inc()
            raise SwapRefused(f"reload of {model!r} to {artifact} refused (HTTP {code}): {text.strip()}; "
                              "the old model is still serving")
        swaps.labels(model=model).inc()


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
