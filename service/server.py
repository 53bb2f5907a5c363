"""Runs the HTTP service under uvicorn in the foreground.

The socket is bound here, before uvicorn starts, so that port 0 means "any free port" without a
race; the bound URL is then published to ``settings.url_file`` for ``quarry up``. With port 0
and a ``port_file``, the service first takes the port it had last time (so a client's URL
survives a restart); when that port is taken it falls back to a free one and logs so.
"""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path

import uvicorn

from service.app import create_app
from service.settings import ServiceSettings

log = logging.getLogger(__name__)


def serve(settings: ServiceSettings) -> None:
    """Serve until SIGINT/SIGTERM."""
    sock = bind_socket(settings)
    host, port = sock.getsockname()[:2]
    if settings.port_file is not None:
        _publish(settings.port_file, str(port))
    _publish(settings.url_file, f"http://{host}:{port}")
    config = uvicorn.Config(
        create_app(settings), log_level="info", access_log=False, timeout_graceful_shutdown=10
    )
    uvicorn.Server(config).run(sockets=[sock])


def bind_socket(settings: ServiceSettings) -> socket.socket:
    """The listening socket: the configured port; with port 0, the remembered one if it is
    free, else any free port."""
    host, port = settings.service.host, settings.service.port
    remembered = _remembered_port(settings.port_file) if port == 0 else None
    if remembered is not None:
        try:
            return _bound(host, remembered)
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            log.warning("port %d, the service's last, is taken; serving on a free port", remembered)
    return _bound(host, port)


def _bound(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _remembered_port(path: Path | None) -> int | None:
    try:
        port = int(path.read_text().strip()) if path is not None else 0
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def _publish(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    temp.write_text(text + "\n")
    temp.replace(path)
