"""`globalstore serve --otel` against a real OpenTelemetry Collector (OTLP over HTTP in, the
debug exporter out): the collector receives the store's metrics, the request spans and the
restore's span. GLOBALSTORE_TEST_OTELCOL names the collector binary (one with the otlp
receiver and the debug exporter, such as the builder makes: docs/operations.md); without it
the test is skipped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from globalstore.localkafka import free_port
from tests.integration.serve_support import serving_process
from tests.integration.store_support import produce

COLLECTOR = os.environ.get("GLOBALSTORE_TEST_OTELCOL")
CONFIG = """
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
exporters:
  debug:
    verbosity: detailed
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
    metrics:
      receivers: [otlp]
      exporters: [debug]
"""


@pytest.mark.skipif(not COLLECTOR, reason="GLOBALSTORE_TEST_OTELCOL names no collector")
def test_serve_exports_metrics_and_spans_to_a_real_collector(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    assert COLLECTOR is not None
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", 1), ("b", 2)])
    port = free_port()
    config = tmp_path / "collector.yaml"
    config.write_text(CONFIG.format(port=port))
    received = tmp_path / "collector.log"
    with received.open("w") as out:
        collector = subprocess.Popen([COLLECTOR, "--config", str(config)], stderr=out, stdout=out)
    try:
        _wait_listening(port)
        command = [str(Path(sys.executable).parent / "globalstore"), "serve", "--topic", topic]
        command += ["--bootstrap-servers", kafka_bootstrap, "--path", str(tmp_path / "s")]
        command += ["--otel"]
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_METRIC_EXPORT_INTERVAL": "500",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "globalstore-test",
        }
        proc, base = serving_process(command, env)
        try:
            deadline = time.monotonic() + 30
            while httpx.get(f"{base}/readyz").status_code != 200:
                assert time.monotonic() < deadline, "not ready"
                time.sleep(0.1)
            assert httpx.get(f"{base}/v1/status").json()["key_count"] == 2
            wanted = (
                "globalstore_ready",
                "globalstore_record_delay_seconds_bucket",
                "Name           : GET /v1/status",
                "Name           : globalstore.restore",
                "globalstore-test",
            )
            deadline = time.monotonic() + 30
            while not all(w in received.read_text() for w in wanted):
                missing = [w for w in wanted if w not in received.read_text()]
                assert time.monotonic() < deadline, f"the collector never got {missing}"
                time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(30)
    finally:
        collector.terminate()
        collector.wait(30)


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/")
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the collector never listened"
            time.sleep(0.1)
