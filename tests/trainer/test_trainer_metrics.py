"""Goodput export: Prometheus text files, and OTLP refused cleanly without its SDK."""

from __future__ import annotations

import gzip
import logging
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from trainer.config import GoodputSection
from trainer.metrics import MetricsExporter


def test_text_file_holds_the_gauges_and_phases(tmp_path: Path) -> None:
    exporter = MetricsExporter(GoodputSection(), tmp_path, "run-a", rank=1)
    exporter.update({"step": 12.0, "goodput_fraction": 0.5}, {"compute": 3.0, "recovery": 1.5})
    exporter.export()
    text = (tmp_path / "rank-1.prom").read_text()
    assert 'quarry_trainer_step{rank="1",run="run-a"} 12.0' in text
    assert 'quarry_trainer_phase_seconds{phase="recovery",rank="1",run="run-a"} 1.5' in text
    exporter.close()


class _Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP metrics endpoint on loopback that keeps every request it decodes."""

    def __init__(self) -> None:
        self.requests: list[ExportMetricsServiceRequest] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/metrics"


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        self.server.requests.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    server = _Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _points(requests: list[ExportMetricsServiceRequest]) -> dict[str, tuple[float, dict[str, str]]]:
    points = {}
    for request in requests:
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.gauge.data_points:
                        labels = {a.key: a.value.string_value for a in point.attributes}
                        points[labels["name"]] = (point.as_double, labels)
    return points


def test_otlp_exports_the_gauges_to_a_collector(tmp_path: Path, receiver: _Receiver) -> None:
    config = GoodputSection(otlp_endpoint=receiver.endpoint, textfile=False)
    exporter = MetricsExporter(config, tmp_path, "run-c", rank=1)
    exporter.update({"step": 7.0, "goodput_fraction": 0.75}, {"compute": 2.5})
    exporter.close()  # flushes: the last collection reaches the collector
    points = _points(receiver.requests)
    assert points["step"] == (7.0, {"run": "run-c", "rank": "1", "name": "step"})
    assert points["goodput_fraction"][0] == 0.75
    assert points["phase_seconds.compute"][0] == 2.5


def test_otlp_without_the_sdk_warns_and_carries_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trainer image without the OpenTelemetry SDK: importing it fails (None in sys.modules).
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.metrics", None)
    config = GoodputSection(otlp_endpoint="http://127.0.0.1:4318/v1/metrics", textfile=False)
    with caplog.at_level(logging.WARNING):
        exporter = MetricsExporter(config, tmp_path, "run-b", rank=0)
    assert "OTLP export is off" in caplog.text
    exporter.update({"step": 1.0}, {})
    exporter.export()
    exporter.close()
    assert not (tmp_path / "rank-0.prom").exists()
