"""Serving tests: real tritonserver processes on 127.0.0.1, free ports, every server stopped."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.serve.artifacts import make_artifact
from trtforge.serve.server import ServeConfig, Server, free_ports  # noqa: F401 (tests import it from here)

TOKEN = "test-admin-token"


def serve_config(**fields) -> ServeConfig:
    http, grpc, metrics = free_ports()
    fields.setdefault("admin_token", TOKEN)
    return ServeConfig(http_port=http, grpc_port=grpc, metrics_port=metrics, **fields)


@pytest.fixture
def start_server():
    """``start_server(artifacts, **config)`` → a started Server; all of them stopped at teardown."""
    servers: list[Server] = []

    def start(artifacts, repository=None, **fields) -> Server:
        server = Server(artifacts, serve_config(**fields), repository=repository)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()
        assert not server.running


@pytest.fixture(scope="session")
def linear_v1(tmp_path_factory) -> Path:
    return make_artifact(tmp_path_factory.mktemp("v1"), scale=1.0)


def grpc_infer(server: Server, x: np.ndarray, model: str = "linear", client=None) -> np.ndarray:
    from tritonclient.grpc import InferenceServerClient, InferInput

    client = client or InferenceServerClient(server.url("grpc"))
    tensor = InferInput("x", list(x.shape), "FP32" if x.dtype == np.float32 else "FP64")
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor], client_timeout=30).as_numpy("y")


def metric(server: Server, name: str, model: str = "linear") -> float:
    """The sum of ``name``'s samples for ``model`` (0 when absent; the parser adds _total to counters)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(server.metrics_text()):
        for sample in family.samples:
            if sample.name.removesuffix("_total") == name.removesuffix("_total") and \
                    sample.labels.get("model") == model:
                total += sample.value
    return total


def http_status(url: str, data: bytes | None = None, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
