"""`globalstore serve` as a process: token from the environment, probes, and SIGTERM = stop
accepting, finish what is in flight, close the store (its directory can be opened again)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx

from globalstore import GlobalStore
from tests.integration.serve_support import serving_process
from tests.integration.store_support import produce


def test_serve_stops_gracefully_on_sigterm_and_closes_the_store(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", 1)])
    store_path = tmp_path / "s"
    command = [str(Path(sys.executable).parent / "globalstore"), "serve", "--topic", topic]
    command += ["--bootstrap-servers", kafka_bootstrap, "--path", str(store_path)]
    command += ["--max-wait", "30"]
    proc, base = serving_process(command, {**os.environ, "GLOBALSTORE_TOKEN": "t0ken"})
    auth = {"Authorization": "Bearer t0ken"}
    try:
        assert httpx.get(f"{base}/v1/keys/a").status_code == 401
        assert httpx.get(f"{base}/v1/keys/a", headers=auth).json()["value"] == 1

        # A request waiting for a record not produced yet is in flight when SIGTERM comes.
        answers: list[httpx.Response] = []
        query = {"min_position": "0:2", "wait": "25"}
        waiter = threading.Thread(
            target=lambda: answers.append(
                httpx.get(f"{base}/v1/keys/b", params=query, headers=auth, timeout=30)
            )
        )
        waiter.start()
        deadline = time.monotonic() + 10
        waiting = "globalstore_min_position_waiting 1.0"
        while waiting not in httpx.get(f"{base}/metrics", headers=auth).text:
            assert time.monotonic() < deadline, "the waiting request never arrived"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while True:  # new connections are refused while the waiting request still waits
            try:
                httpx.get(f"{base}/healthz", timeout=1)
            except httpx.TransportError:
                break
            assert time.monotonic() < deadline, "still accepting 10s after SIGTERM"
            time.sleep(0.02)
        assert not answers, "the in-flight request ended before its record was produced"
        produce(kafka_bootstrap, topic, [("b", 2)])
        waiter.join(30)
        assert [r.status_code for r in answers] == [200], [r.text for r in answers]
        assert answers[0].json()["value"] == 2
        # uvicorn re-raises the signal once shut down, so the exit reads "terminated by
        # SIGTERM" (143 in a shell), as supervisors expect; nothing may have failed on the way.
        assert proc.wait(30) == -signal.SIGTERM
        errors = proc.stderr.read()  # type: ignore[union-attr]
        assert "Traceback" not in errors and "ERROR" not in errors, errors
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The store was closed: the directory opens again, with both records.
    with GlobalStore(topic, kafka_bootstrap, store_path) as store:
        assert dict(store.items()) == {"a": 1, "b": 2}
