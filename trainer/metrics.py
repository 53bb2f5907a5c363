"""Export the run's goodput figures: Prometheus text files, a Pushgateway, or OTLP.

Every rank writes ``<run dir>/metrics/rank-<rank>.prom`` (node-exporter's textfile collector
format, replaced atomically); with ``pushgateway_url`` the same registry is pushed; with
``otlp_endpoint`` and the OpenTelemetry SDK and OTLP/HTTP exporter installed, the gauges are
also exported over OTLP. Export failures are logged, never fatal.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from .config import GoodputSection

log = logging.getLogger(__name__)

PREFIX = "quarry_trainer_"
GAUGES = {
    "step": "optimizer steps completed",
    "loss": "training loss of the last step",
    "goodput_fraction": "compute seconds over wall seconds since the run started",
    "step_time_seconds": "mean step time (data wait plus compute), seconds",
    "samples_per_second": "samples consumed per second by this rank",
    "mfu": "model FLOPs utilization against the configured peak",
    "restarts": "worker-group restarts so far",
    "wall_seconds": "wall seconds since the run started",
}


class MetricsExporter:
    """One rank's gauges and the sinks they go to.

    :param config: sinks and their settings.
    :param directory: where the text file goes.
    :param run_name: the ``run`` label; :param rank: the ``rank`` label.
    """

    def __init__(self, config: GoodputSection, directory: Path, run_name: str, rank: int) -> None:
        self.config = config
        self.path = directory / f"rank-{rank}.prom"
        self.labels = {"run": run_name, "rank": str(rank)}
        self.registry = CollectorRegistry()
        names = list(self.labels)
        self.gauges = {
            name: Gauge(PREFIX + name, text, names, registry=self.registry)
            for name, text in GAUGES.items()
        }
        self.phases = Gauge(
            PREFIX + "phase_seconds",
            "wall seconds per phase",
            [*names, "phase"],
            registry=self.registry,
        )
        self.values: dict[str, float] = {}
        self._otlp = _start_otlp(config.otlp_endpoint, self) if config.otlp_endpoint else None

    def update(self, values: dict[str, float], phases: dict[str, float]) -> None:
        """Set the gauges (names from :data:`GAUGES`) and the per-phase seconds."""
        for name, value in values.items():
            self.gauges[name].labels(**self.labels).set(value)
            self.values[name] = value
        for phase, seconds in phases.items():
            self.phases.labels(**self.labels, phase=phase).set(seconds)
            self.values[f"phase_seconds.{phase}"] = seconds

    def export(self) -> None:
        """Write the text file and push to the gateway, as configured."""
        if self.config.textfile:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_to_textfile(str(self.path), self.registry)
            except OSError as exc:
                log.warning("cannot write metrics text file %s: %s", self.path, exc)
        if self.config.pushgateway_url:
            try:
                push_to_gateway(
                    self.config.pushgateway_url,
                    job="quarry_trainer",
                    registry=self.registry,
                    grouping_key=self.labels,
                    timeout=5,
                )
            except OSError as exc:
                log.warning("cannot push metrics to %s: %s", self.config.pushgateway_url, exc)

    def close(self) -> None:
        """Flush and stop the OTLP exporter, if one runs."""
        if self._otlp is not None:
            self._otlp.shutdown()


def _start_otlp(endpoint: str, exporter: MetricsExporter) -> Any:
    """An OpenTelemetry MeterProvider exporting the gauges over OTLP/HTTP, or ``None``."""
    try:
        sdk = importlib.import_module("opentelemetry.sdk.metrics")
        export = importlib.import_module("opentelemetry.sdk.metrics.export")
        otlp = importlib.import_module("opentelemetry.exporter.otlp.proto.http.metric_exporter")
        api = importlib.import_module("opentelemetry.metrics")
    except ImportError:
        log.warning(
            "goodput.otlp_endpoint is set but opentelemetry-sdk and "
            "opentelemetry-exporter-otlp-proto-http are not installed; OTLP export is off"
        )
        return None
    reader = export.PeriodicExportingMetricReader(otlp.OTLPMetricExporter(endpoint=endpoint))
    provider = sdk.MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("quarry.trainer")

    def observe(_options: Any) -> list[Any]:
        return [
            api.Observation(value, {**exporter.labels, "name": name})
            for name, value in exporter.values.items()
        ]

    meter.create_observable_gauge(PREFIX + "value", callbacks=[observe])
    return provider
