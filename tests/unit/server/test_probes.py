"""The probes and the status of the HTTP API on a store that stopped on an error: /healthz
and /readyz 503, the metric set, /healthz naming the error's type only. The store here is a
small fake reporting a status; tests/integration/test_store_disk_full.py fills a real disk
under a real one."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from globalstore.errors import AuthenticationError, StorageError
from globalstore.read.protocols import StoreStatus
from globalstore.server import ServedStore, ServerSettings, create_app, hosts_for
from globalstore.server.settings import LOCAL_HOSTS
from globalstore.status import State

with warnings.catch_warnings():  # starlette's notice about the httpx it uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

SECRET_MESSAGE = "writing to the store at /srv/secret-path failed: IO error: No space left"


class ReportingStore:
    """A started store as the API sees it: it only reports `report` as its status."""

    topic = "t"
    path = Path("/srv/secret-path")

    def __init__(self, report: StoreStatus) -> None:
        self.report = report

    def status(self) -> StoreStatus:
        return self.report

    def start(self, timeout: float = 60.0, *, wait: bool = True) -> None:
        self.starts += 1

    starts = 0

    def close(self) -> None:
        pass


def status(state: State, failure: str | None = None) -> StoreStatus:
    return StoreStatus(
        topic="t",
        path="/srv/secret-path",
        state=state,
        ready=state is State.RUNNING,
        position={0: 5},
        lag={0: 0},
        key_count=5,
        layout_version=1,
        last_restore_at=1.0,
        connected=True,
        staleness_seconds=0.0,
        last_error=None if failure is None else f"{failure}: {SECRET_MESSAGE}",
        failure=failure,
    )


def client_for(served: ServedStore, token: str | None = None) -> Iterator[TestClient]:
    with TestClient(
        create_app(served, ServerSettings(token=token)), base_url="http://localhost"
    ) as client:
        yield client


@pytest.fixture
def failed() -> Iterator[TestClient]:
    """The API, with a token, on a store whose thread stopped on a full disk."""
    store = ReportingStore(status(State.FAILED, "StorageError"))
    yield from client_for(ServedStore.of(store), token="tok")  # type: ignore[arg-type]


def test_a_stopped_store_fails_both_probes_naming_the_error_type_only(failed: TestClient) -> None:
    assert failed.get("/readyz").status_code == 503
    health = failed.get("/healthz")  # no token: it is open to load balancers
    assert health.status_code == 503
    assert health.json() == {"status": "failed", "error": "StorageError"}


def test_status_says_why_and_the_metric_is_set(failed: TestClient) -> None:
    auth = {"Authorization": "Bearer tok"}
    report = failed.get("/v1/status", headers=auth).json()
    assert report["state"] == "failed" and report["failure"] == "StorageError"
    assert report["last_error"] == f"StorageError: {SECRET_MESSAGE}"
    metrics = failed.get("/metrics", headers=auth).text
    assert 'globalstore_failed{error="StorageError"} 1.0' in metrics


def test_a_running_store_is_alive_and_not_failed() -> None:
    store = ReportingStore(status(State.RUNNING))
    for client in client_for(ServedStore.of(store)):  # type: ignore[arg-type]
        assert client.get("/healthz").json() == {"status": "alive"}
        assert client.get("/readyz").status_code == 200
        assert 'globalstore_failed{error=""} 0.0' in client.get("/metrics").text


def test_the_notes_a_reader_refused_are_a_metric() -> None:
    store = ReportingStore(dataclasses.replace(status(State.RUNNING), refused_notes=3))
    for client in client_for(ServedStore.of(store)):  # type: ignore[arg-type]
        metrics = client.get("/metrics").text
        assert "globalstore_refused_notes_total 3.0" in metrics
        assert "globalstore_transform_failures_total 0.0" in metrics


def test_a_store_that_could_not_start_names_the_error_type_only() -> None:
    served = ServedStore.of(ReportingStore(status(State.CLOSED)))  # type: ignore[arg-type]
    served.error = StorageError(SECRET_MESSAGE)
    for client in client_for(served):
        health = client.get("/healthz")
        assert health.status_code == 503
        assert health.json() == {"status": "failed", "error": "StorageError"}


def _status_codes(settings: ServerSettings, hosts: list[str]) -> dict[str, int]:
    """The status of GET /v1/status with each Host header."""
    app = create_app(ServedStore.of(ReportingStore(status(State.RUNNING))), settings)  # type: ignore[arg-type]
    with TestClient(app, base_url="http://localhost") as client:
        return {host: client.get("/v1/status", headers={"Host": host}).status_code
                for host in hosts}  # fmt: skip


def test_a_request_naming_another_host_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    """A page whose name an attacker rebound to 127.0.0.1 (DNS rebinding) sends that name."""
    local = ["localhost:8080", "127.0.0.1", "[::1]:8080"]
    foreign = ["attacker.example", "attacker.example:8080", "localhost.attacker.example"]
    codes = _status_codes(ServerSettings(), local + foreign)
    assert codes == {**dict.fromkeys(local, 200), **dict.fromkeys(foreign, 400)}
    assert "serving without a token" in caplog.text


def test_the_hosts_answered_are_configurable(caplog: pytest.LogCaptureFixture) -> None:
    settings = ServerSettings(allowed_hosts=("*.internal",))
    codes = _status_codes(settings, ["orders.internal", "localhost"])
    assert codes == {"orders.internal": 200, "localhost": 400}
    caplog.clear()
    create_app(ServedStore.of(ReportingStore(status(State.RUNNING))), ServerSettings(token="t"))  # type: ignore[arg-type]
    assert "serving without a token" not in caplog.text


def test_serve_answers_its_bind_address_and_any_name_on_every_interface() -> None:
    assert hosts_for("127.0.0.1") == (*LOCAL_HOSTS, "127.0.0.1")
    assert hosts_for("10.1.2.3") == (*LOCAL_HOSTS, "10.1.2.3")
    assert hosts_for("fe80::1") == (*LOCAL_HOSTS, "[fe80::1]")
    assert hosts_for("0.0.0.0") == hosts_for("::") == ("*",)


class FailingStore(ReportingStore):
    """A store whose count fails on its disk, as RocksDB says it: naming the file."""

    def count(self) -> int:
        raise StorageError(f"IO error: No space left on device: {self.path}/db/0042.log")


def test_error_bodies_name_the_store_not_where_it_lies() -> None:
    for client in client_for(ServedStore.of(FailingStore(status(State.RUNNING)))):  # type: ignore[arg-type]
        response = client.get("/v1/count")
        assert response.status_code == 500
        told = response.json()["error"]
        assert (
            told == "StorageError: IO error: No space left on device: .../secret-path/db/0042.log"
        )


STALE = "it last knew it held the topic's end 7.5 s ago (max_staleness 5 s); 900 records behind"


def test_a_stale_store_is_alive_but_not_ready_and_says_why() -> None:
    report = dataclasses.replace(status(State.RUNNING), ready=False, fresh=False, stale=STALE)
    store = ReportingStore(report)
    for client in client_for(ServedStore.of(store)):  # type: ignore[arg-type]
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json() == {"status": "stale", "reason": STALE}
        assert client.get("/healthz").json() == {"status": "alive"}  # no restart needed
        metrics = client.get("/metrics").text
        assert "globalstore_fresh 0.0" in metrics and "globalstore_ready 0.0" in metrics
    assert store.starts == 0  # a stale store is started: the server does not start it again


def test_a_fresh_store_shows_it() -> None:
    store = ReportingStore(dataclasses.replace(status(State.RUNNING), fresh=True))
    for client in client_for(ServedStore.of(store)):  # type: ignore[arg-type]
        assert client.get("/readyz").json() == {"status": "ready"}
        assert "globalstore_fresh 1.0" in client.get("/metrics").text


def test_the_status_of_a_store_that_could_not_start_says_why() -> None:
    """As /healthz does: the store itself only says it is closed."""
    served = ServedStore.of(ReportingStore(status(State.CLOSED)))  # type: ignore[arg-type]
    served.error = AuthenticationError("authentication to the broker failed (SASL)")
    for client in client_for(served):
        report = client.get("/v1/status").json()
        assert report["state"] == "failed" and report["failure"] == "AuthenticationError"
        assert report["last_error"] == (
            "AuthenticationError: authentication to the broker failed (SASL)"
        )
        assert report["start_error"] == "authentication to the broker failed (SASL)"
