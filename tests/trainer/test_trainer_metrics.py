"""Goodput export: Prometheus text files, and OTLP refused cleanly without its SDK."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

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


@pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry.sdk") is not None, reason="the OTLP SDK is installed"
)
def test_otlp_without_the_sdk_warns_and_carries_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = GoodputSection(otlp_endpoint="http://127.0.0.1:4318/v1/metrics", textfile=False)
    with caplog.at_level(logging.WARNING):
        exporter = MetricsExporter(config, tmp_path, "run-b", rank=0)
    assert "OTLP export is off" in caplog.text
    exporter.update({"step": 1.0}, {})
    exporter.export()
    exporter.close()
    assert not (tmp_path / "rank-0.prom").exists()
