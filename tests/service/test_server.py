"""The service's listening socket: a remembered port is taken again; a taken one falls back
to a free port (and says so); an explicit port is used as given."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
from pydantic import SecretStr

from service.server import bind_socket
from service.settings import ServiceConfig, ServiceSettings
from tests.fixtures.stack import run_quarry
from warehouse.config import DuckLakeConfig


def settings(folder: Path, port: int = 0) -> ServiceSettings:
    return ServiceSettings(
        service=ServiceConfig(port=port),
        warehouse=DuckLakeConfig(),
        operational_dsn=SecretStr("host=/nowhere"),
        manifest_dir=folder / "manifests",
        url_file=folder / "run" / "service.url",
        port_file=folder / "service.port",
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_remembered_port_is_taken_again(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "service.port").write_text(f"{port}\n")
    with bind_socket(settings(tmp_path)) as sock:
        assert sock.getsockname()[1] == port


def test_a_taken_port_falls_back_to_a_free_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        (tmp_path / "service.port").write_text(str(taken))
        with caplog.at_level(logging.WARNING), bind_socket(settings(tmp_path)) as sock:
            assert sock.getsockname()[1] not in (taken, 0)
    assert f"port {taken}, the service's last, is taken" in caplog.text


@pytest.mark.parametrize("content", ["", "not a port", "70000", "-1"])
def test_a_bad_port_file_is_ignored(tmp_path: Path, content: str) -> None:
    (tmp_path / "service.port").write_text(content)
    with bind_socket(settings(tmp_path)) as sock:
        assert sock.getsockname()[1] > 0


def test_an_explicit_port_is_used_and_a_taken_one_is_an_error(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "service.port").write_text(str(free_port()))
    with bind_socket(settings(tmp_path, port)) as sock:
        assert sock.getsockname()[1] == port
        sock.listen()
        with pytest.raises(OSError):
            bind_socket(settings(tmp_path, port))


def test_quarry_serve_on_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        done = run_quarry(tmp_path / "state", "serve", "--port", str(port), check=False)
    assert done.returncode == 3
    assert done.stderr.strip() == (
        f"error: port 127.0.0.1:{port} is taken; pick another with --port or "
        "QUARRY_SERVICE__PORT (0, the default, takes the service's last port or any free one)"
    )
