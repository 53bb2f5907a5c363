"""Runs the HTTP service under uvicorn in the foreground.

The socket is bound here, before uvicorn starts, so that port 0 means "any free port" without a
race; the bound URL is then published to ``settings.url_file`` for ``quarry up``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import uvicorn

from service.app import create_app
from service.settings import ServiceSettings


def serve(settings: ServiceSettings) -> None:
    """Serve until SIGINT/SIGTERM."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.service.host, settings.service.port))
    host, port = sock.getsockname()[:2]
    _publish_url(settings.url_file, f"http://{host}:{port}")
    config = uvicorn.Config(
        create_app(settings), log_level="info", access_log=False, timeout_graceful_shutdown=10
    )
    uvicorn.Server(config).run(sockets=[sock])


def _publish_url(path: Path, url: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    temp.write_text(url + "\n")
    temp.replace(path)
