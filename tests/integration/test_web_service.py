"""docs/web-service.md's examples, each run against a real broker: the FastAPI service under
a real uvicorn (readiness, "wait until my write is visible", the project's API mounted beside
its routes), the Starlette one, the sync WSGI one, and FastAPI workers reading one store."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from wsgiref.util import setup_testing_defaults

import httpx
import pytest

from globalstore import GlobalStore
from tests.integration.store_support import produce
from tests.ports import PortTakenError, on_a_free_port, says_port_taken
from tests.waiting import eventually

with warnings.catch_warnings():  # starlette's notice about the httpx it uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
UVICORN = Path(sys.executable).with_name("uvicorn")


@pytest.fixture
def orders(kafka_bootstrap: str, make_topic, tmp_path: Path) -> dict[str, str]:
    """A topic of 50 orders over 3 partitions; the examples' environment for it."""
    topic = make_topic(partitions=3)
    produce(kafka_bootstrap, topic, [(f"o{i}", {"n": i}) for i in range(50)])
    return {
        "ORDERS_TOPIC": topic,
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "ORDERS_STORE": str(tmp_path / "orders"),
    }


def _example(name: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """examples/<name>.py imported afresh with `env` (it reads it at import)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    sys.modules.pop(f"examples.{name}", None)
    return importlib.import_module(f"examples.{name}")


def _uvicorn(app: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    def start(port: int) -> tuple[subprocess.Popen[str], str]:
        command = [str(UVICORN), app, "--port", str(port)]
        proc = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True
        )
        base = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
            try:
                return httpx.get(f"{base}/ready").status_code == 200
            except httpx.TransportError:
                return False

        try:
            eventually(answers, 60, lambda: "uvicorn not ready", 0.05)
        except AssertionError as exc:
            proc.kill()
            if says_port_taken(str(exc)):
                raise PortTakenError(str(exc)) from exc
            raise
        return proc, base

    return on_a_free_port(start)


def _written_after(bootstrap: str, topic: str, key: str, value: Any) -> str:
    """Write `key`; the position after it, as JSON with string partitions (as /v1/status)."""
    written = produce(bootstrap, topic, [(key, value)])
    return json.dumps({str(p): o for p, o in written.items()})


def test_fastapi_under_uvicorn(orders: dict[str, str]) -> None:
    server, base = _uvicorn("examples.fastapi_service:app", orders)
    topic, bootstrap = orders["ORDERS_TOPIC"], orders["KAFKA_BOOTSTRAP"]
    try:
        ready = httpx.get(f"{base}/ready").json()
        assert ready["state"] == "running" and set(ready["lag"]) == {"0", "1", "2"}
        assert httpx.get(f"{base}/orders/o7").json() == {"n": 7}
        assert httpx.get(f"{base}/orders/nope").status_code == 404
        for round_ in range(5):  # each answer is of the write just made, never an older one
            after = _written_after(bootstrap, topic, "o7", {"n": 100 + round_})
            answer = httpx.get(f"{base}/orders/o7", params={"after": after})
            assert answer.status_code == 200 and answer.json() == {"n": 100 + round_}
        missing = httpx.get(f"{base}/orders/o7", params={"after": '{"9": 1}'})
        assert missing.status_code == 400 and "has no partition 9" in missing.text
        mounted = httpx.get(f"{base}/store/v1/keys/o8")  # the project's API beside the routes
        assert mounted.status_code == 200 and mounted.json()["value"] == {"n": 8}
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(30)
    errors = server.stderr.read()  # type: ignore[union-attr]
    assert code in (0, -signal.SIGTERM) and "Traceback" not in errors, errors  # uvicorn re-raises


def test_a_sigterm_with_change_streams_open_stops_the_service_at_once(
    orders: dict[str, str],
) -> None:
    """The service's own /changes and the mounted API's /store/v1/changes, each with a client
    that stays: SIGTERM ends both streams (after the changes they hold) and the server stops,
    instead of waiting for the clients to leave (uvicorn's "Waiting for connections to
    close")."""
    server, base = _uvicorn("examples.fastapi_service:app", orders)
    topic, bootstrap = orders["ORDERS_TOPIC"], orders["KAFKA_BOOTSTRAP"]
    seen: dict[str, list[bytes]] = {"/changes": [], "/store/v1/changes": []}
    ended: dict[str, bool] = {}

    def follow(route: str) -> None:
        with httpx.stream("GET", f"{base}{route}", timeout=None) as response:
            for line in response.iter_lines():
                seen[route].append(line.encode())
        ended[route] = True

    readers = [threading.Thread(target=follow, args=(route,), daemon=True) for route in seen]
    try:
        for reader in readers:
            reader.start()
        eventually(lambda: all(seen.values()) or _wrote(bootstrap, topic), 30,
                   lambda: f"no stream began: {seen}", 0.2)  # fmt: skip
        began = time.monotonic()
        server.send_signal(signal.SIGTERM)
        code = server.wait(30)
        stopped = time.monotonic() - began
    finally:
        if server.poll() is None:
            server.kill()
    for reader in readers:
        reader.join(10)
    errors = server.stderr.read()  # type: ignore[union-attr]
    assert code in (0, -signal.SIGTERM) and "Traceback" not in errors, errors
    assert stopped < 10, (stopped, errors)  # not held until the clients leave
    assert ended == {"/changes": True, "/store/v1/changes": True}
    assert any(b'"o1"' in line for line in seen["/changes"]), seen["/changes"][:5]


def _wrote(bootstrap: str, topic: str) -> bool:
    """Write a change for the streams to carry; False, so eventually() looks again."""
    produce(bootstrap, topic, [("o1", {"n": 1, "at": time.time()})])
    return False


def test_starlette(orders: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    example = _example("starlette_service", orders, monkeypatch)
    with TestClient(example.app) as client:  # runs the lifespan: restored before requests
        assert client.get("/orders/o3").json() == {"n": 3}
        assert client.get("/orders/nope").status_code == 404
        assert client.get("/count").json() == {"count": 50}
    assert example.store.status().state == "closed"


def _wsgi_get(app: Any, path: str, query: str = "") -> tuple[str, Any]:
    environ: dict[str, Any] = {"PATH_INFO": path, "QUERY_STRING": query}
    setup_testing_defaults(environ)
    started: list[str] = []
    body = b"".join(app(environ, lambda status, headers: started.append(status)))
    return started[0], json.loads(body)


def test_wsgi(orders: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    example = _example("wsgi_service", orders, monkeypatch)  # starts the store at import
    try:
        assert _wsgi_get(example.app, "/orders/o4") == ("200 OK", {"n": 4})
        after = _written_after(orders["KAFKA_BOOTSTRAP"], orders["ORDERS_TOPIC"], "o4", "new")
        query = httpx.QueryParams({"after": after})
        assert _wsgi_get(example.app, "/orders/o4", str(query)) == ("200 OK", "new")
    finally:
        example.store.close()


@pytest.fixture
def writer(orders: dict[str, str]) -> Iterator[GlobalStore]:
    """The process that writes the store the workers read (here: this one)."""
    with GlobalStore(
        orders["ORDERS_TOPIC"], orders["KAFKA_BOOTSTRAP"], orders["ORDERS_STORE"]
    ) as store:
        yield store


def test_workers_read_one_store(
    orders: dict[str, str], writer: GlobalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = _example("shared_workers", orders, monkeypatch)
    with TestClient(example.app) as client:
        assert client.get("/orders/o5").json() == {"n": 5}
        produce(orders["KAFKA_BOOTSTRAP"], orders["ORDERS_TOPIC"], [("o5", "new")])
        eventually(lambda: client.get("/orders/o5").json() == "new", 10, lambda: "not seen")
