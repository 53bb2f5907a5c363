"""The remote path: moto's S3 server in its own process on loopback, reached through s3fs (the
loader's object store), so every storage trip is a real HTTP round trip."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fsspec.spec import AbstractFileSystem
from pinned import BUCKET
from pydantic import SecretStr

from loader import ObjectStore, StoreConfig

START_TIMEOUT_S = 60.0
# werkzeug's access log: 127.0.0.1 - - [date] "GET /bucket/key HTTP/1.1" 200 -
_REQUEST = re.compile(r"(?:GET|HEAD|PUT|POST|DELETE) /\S* HTTP/[\d.]+")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """Run ``python -m moto.server`` on a free loopback port, its request log in ``log``;
    yield its endpoint URL."""
    port = free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with log.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto's server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto's server did not listen on port {port} in {START_TIMEOUT_S} s")


def s3_store(endpoint: str) -> StoreConfig:
    return StoreConfig(
        s3_endpoint_url=endpoint,
        s3_key="bench",
        s3_secret=SecretStr("bench"),
        s3_region="us-east-2",
    )


def s3_filesystem(store: StoreConfig, *, create_bucket: bool = False) -> AbstractFileSystem:
    """A fresh s3fs filesystem on moto (no listing cache shared with another)."""
    fs, _ = ObjectStore(store).filesystem(f"s3://{BUCKET}")
    if create_bucket:
        fs.mkdir(BUCKET)
    return fs


def requests_logged(log: Path) -> int:
    """HTTP requests moto's server has logged so far (one line per request)."""
    if not log.exists():
        return 0
    return len(_REQUEST.findall(log.read_text(errors="replace")))
