"""The HTTP API against a real store on a real broker, through a real uvicorn server."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from pathlib import Path

import orjson
import pytest

from globalstore import GlobalStore
from globalstore.listeners import StoreListener
from globalstore.server import ServerSettings
from tests.integration.serve_support import (
    metric,
    produce_incompressible,
    raw_get,
    read_to_end,
    running_server,
    served_store,
    wait_position,
    wait_ready,
)
from tests.integration.store_support import produce, produce_raw
from tests.pipelines.kafka_read import end_offsets
from tests.ports import closed_port
from tests.waiting import eventually


def test_get_key_gives_value_and_record_timestamp_and_404_when_absent(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [("order-1", {"n": 1}), ("a/b c", [1, 2]), ("gone", {"x": 1})])
    produce(kafka_bootstrap, topic, [("gone", None)])
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s")) as client:
        wait_ready(client)
        found = client.get("/v1/keys/order-1")
        assert found.status_code == 200, found.text
        body = found.json()
        assert body["key"] == "order-1" and body["value"] == {"n": 1}
        assert abs(body["timestamp"] / 1000 - time.time()) < 300, body
        assert body["partition"] in (0, 1) and body["offset"] >= 0
        slashed = client.get("/v1/keys/a%2Fb%20c")
        assert slashed.status_code == 200 and slashed.json()["value"] == [1, 2], slashed.text
        for absent in ("gone", "never"):
            missing = client.get(f"/v1/keys/{absent}")
            assert missing.status_code == 404, missing.text
            assert missing.json()["key"] == absent


def test_pages_cover_the_range_once_in_key_order_with_a_bounded_limit(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=3)
    keys = [f"k{i:03d}" for i in range(250)] + ["other-1", "other-2"]
    produce(kafka_bootstrap, topic, [(k, {"k": k}) for k in keys])
    settings = ServerSettings(max_limit=100)
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s"), settings) as client:
        wait_ready(client)
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            query = {"prefix": "k", "limit": 60, **({"cursor": cursor} if cursor else {})}
            page = client.get("/v1/keys", params=query).json()
            assert all(item["value"] == {"k": item["key"]} for item in page["items"])
            seen += [item["key"] for item in page["items"]]
            pages += 1
            cursor = page["cursor"]
            if cursor is None:
                break
        assert seen == sorted(k for k in keys if k.startswith("k")), seen[:5]
        assert pages == 5  # 60 + 60 + 60 + 60 + 10
        ranged = client.get("/v1/keys", params={"start": "k010", "end": "k013"}).json()
        assert [i["key"] for i in ranged["items"]] == ["k010", "k011", "k012"]
        assert ranged["cursor"] is None
        too_many = client.get("/v1/keys", params={"limit": 101})
        assert too_many.status_code == 400 and "limit" in too_many.json()["error"]
        default = client.get("/v1/keys").json()
        assert len(default["items"]) == 100 and default["cursor"] is not None


def test_pagination_under_concurrent_writes_neither_skips_nor_repeats(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    """Keys present throughout the walk appear exactly once, in order, while other keys are
    added and deleted and the stable ones are rewritten between pages."""
    topic = make_topic(partitions=3)
    stable = [f"s{i:04d}" for i in range(600)]
    produce(kafka_bootstrap, topic, [(k, {"gen": 0}) for k in stable])
    stop = threading.Event()
    writes = [0]

    def write() -> None:
        gen = 0
        while not stop.is_set():
            gen += 1
            churn = [(f"s{i:04d}x{gen}", {"gen": gen}) for i in range(0, 600, 7)]
            gone = [(f"s{i:04d}x{gen - 1}", None) for i in range(0, 600, 7)]
            again = [(k, {"gen": gen}) for k in stable[gen % 10 :: 10]]
            produce(kafka_bootstrap, topic, churn + gone + again)
            writes[0] += 1

    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s")) as client:
        wait_ready(client)
        writer = threading.Thread(target=write)
        writer.start()
        try:
            seen: list[str] = []
            cursor = None
            while True:
                query = {"prefix": "s", "limit": 25, **({"cursor": cursor} if cursor else {})}
                page = client.get("/v1/keys", params=query).json()
                seen += [i["key"] for i in page["items"]]
                cursor = page["cursor"]
                if cursor is None:
                    break
                # A write round lands between every two pages, however fast the walk.
                before, deadline = writes[0], time.monotonic() + 30
                while writes[0] == before:
                    assert time.monotonic() < deadline, "the writer stopped"
                    time.sleep(0.005)
        finally:
            stop.set()
            writer.join(60)
        assert writes[0] >= 2, f"only {writes[0]} write rounds overlapped the walk"
        assert len(seen) == len(set(seen)), "a key was returned twice"
        assert seen == sorted(seen), "pages out of key order"
        missing = sorted(set(stable) - set(seen))
        assert not missing, f"skipped {len(missing)} stable keys, e.g. {missing[:3]}"


def test_export_streams_every_item_from_the_view_taken_at_the_request(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"e{i:05d}", {"v": 1}) for i in range(5000)])
    settings = ServerSettings(export_chunk=100)
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s"), settings) as client:
        wait_ready(client)
        with client.stream("GET", "/v1/export", params={"prefix": "e"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("application/x-ndjson")
            lines = response.iter_lines()
            first = orjson.loads(next(lines))
            # The view is fixed; now change everything and wait until the store applied it.
            produce(kafka_bootstrap, topic, [(f"e{i:05d}", None) for i in range(0, 5000, 2)])
            produce(kafka_bootstrap, topic, [("e99999", {"v": 2})])
            wait_position(client, end_offsets(kafka_bootstrap, topic))
            rest = [orjson.loads(line) for line in lines if line]
        exported = [first, *rest]
        assert [i["key"] for i in exported] == [f"e{i:05d}" for i in range(5000)]
        assert all(i["value"] == {"v": 1} for i in exported)
        after = client.get("/v1/count").json()["count"]
        assert after == 2501, after


def test_count_status_and_metrics_describe_the_store(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"c{i}", i) for i in range(40)])
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s")) as client:
        wait_ready(client)
        assert client.get("/v1/count").json() == {"count": 40}
        status = client.get("/v1/status").json()
        assert status["ready"] is True and status["state"] == "running", status
        assert status["topic"] == topic and status["layout_version"] == 1
        assert sum(status["position"].values()) == 40
        assert set(status["lag"]) == {"0", "1"}
        assert status["restore"]["records_restored"] == 40 and status["restore"]["done"]
        assert client.get("/v1/keys/c7").status_code == 200
        assert client.get("/v1/keys/nope").status_code == 404
        metrics = client.get("/metrics").text
        assert "globalstore_ready 1.0" in metrics
        assert "globalstore_keys 40.0" in metrics
        assert 'globalstore_lag_records{partition="0"} 0.0' in metrics
        assert 'globalstore_http_requests_total{route="key",status="404"} 1.0' in metrics
        assert 'globalstore_http_request_seconds_count{route="key"} 2.0' in metrics
        assert "globalstore_records_applied_total 40.0" in metrics
        assert "globalstore_decode_errors_total 0.0" in metrics
        assert "security" not in client.get("/openapi.json").json()  # no token: all open


class _Gate(StoreListener):
    """Holds the restore at its start until released: a deterministic 'still restoring'."""

    def __init__(self, inner: StoreListener) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_restore_start(self, topic, start_offsets, end_offsets) -> None:  # type: ignore[no-untyped-def]
        self.inner.on_restore_start(topic, start_offsets, end_offsets)
        self.entered.set()
        assert self.release.wait(60), "test never released the restore"

    def on_batch_restored(self, topic, positions, records) -> None:  # type: ignore[no-untyped-def]
        self.inner.on_batch_restored(topic, positions, records)

    def on_restore_end(self, topic, total_records, seconds) -> None:  # type: ignore[no-untyped-def]
        self.inner.on_restore_end(topic, total_records, seconds)


def test_not_ready_until_restored_then_ready(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("r1", 1), ("r2", 2)])
    gates: list[_Gate] = []

    def wrap(listener: StoreListener) -> _Gate:
        gates.append(_Gate(listener))
        return gates[0]

    served = served_store(topic, kafka_bootstrap, tmp_path / "s", wrap)
    with running_server(served) as client:
        assert gates[0].entered.wait(30), "restore never began"
        try:
            assert client.get("/healthz").status_code == 200
            ready = client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["status"] == "restoring", ready.text
            query = client.get("/v1/keys/r1")
            assert query.status_code == 503 and query.headers["retry-after"] == "1", query.text
            assert client.get("/v1/keys", params={"min_position": "0:1"}).status_code == 503
            status = client.get("/v1/status").json()
            assert status["ready"] is False and status["restore"]["records_to_restore"] == 2
        finally:
            gates[0].release.set()
        wait_ready(client)
        assert client.get("/v1/keys/r1").json()["value"] == 1


def test_min_position_waits_for_the_follower_or_answers_503_with_the_position(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [("m", 1)], partition=0)
    settings = ServerSettings(max_wait=30)
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s"), settings) as client:
        wait_ready(client)
        began = time.monotonic()
        late = client.get("/v1/keys/m", params={"min_position": '{"1": 1}', "wait": "0.3"})
        waited = time.monotonic() - began
        assert late.status_code == 503, late.text
        body = late.json()
        assert body["position"].get("1", 0) == 0 and body["position"]["0"] == 1, body
        assert body["min_position"] == {"1": 1}, body
        assert 0.3 <= waited < 15, waited  # its own wait, not the maximum (30 s)

        answers: list[int] = []
        waiter = threading.Thread(
            target=lambda: answers.append(
                client.get("/v1/keys/n", params={"min_position": "1:1", "wait": "20"}).status_code
            )
        )
        waiter.start()
        produce(kafka_bootstrap, topic, [("n", 2)], partition=1)
        waiter.join(30)
        assert answers == [200], answers
        now = client.get("/v1/keys/m", params={"min_position": "0:1,1:1", "wait": "0"})
        assert now.status_code == 200, now.text


BAD_PARAMETERS = [
    ("/v1/keys", {"limit": "0"}, "limit"),
    ("/v1/keys", {"limit": "ten"}, "limit"),
    ("/v1/keys", {"limit": "1" * 5000}, "limit"),
    ("/v1/keys", {"cursor": "!!not-base64"}, "cursor"),
    ("/v1/keys", {"cursor": "_w"}, "cursor"),  # base64 of b"\xff": not UTF-8
    ("/v1/keys", {"prefix": "p" * 5000}, "prefix"),
    ("/v1/keys/x", {"min_position": "0:abc"}, "min_position"),
    ("/v1/keys/x", {"min_position": "-1:3"}, "min_position"),
    ("/v1/keys/x", {"min_position": "[1, 2]"}, "min_position"),
    ("/v1/keys/x", {"min_position": '{"0": true}'}, "min_position"),
    ("/v1/keys/x", {"min_position": "{nope"}, "min_position"),
    ("/v1/keys/x", {"min_position": "0:\u00b2"}, "min_position"),
    ("/v1/count", {"min_position": "0:1", "wait": "nan"}, "wait"),
    ("/v1/count", {"min_position": "0:1", "wait": "1e9"}, "wait"),
    ("/v1/export", {"min_position": "0:9", "wait": "-1"}, "wait"),
]


def test_malformed_parameters_get_400_naming_them(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s")) as client:
        wait_ready(client)
        for path, query, name in BAD_PARAMETERS:
            response = client.get(path, params=query)
            assert response.status_code == 400, (path, query, response.text)
            assert name in response.json()["error"], (path, query, response.text)
        huge = client.get("/v1/keys", params={"prefix": "x" * 40_000})
        assert huge.status_code == 414, huge.text


def test_bearer_token_protects_every_route_but_the_probes(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("t", 1)])
    settings = ServerSettings(token="s3cret-token")
    good = {"Authorization": "Bearer s3cret-token"}
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s"), settings) as client:
        wait_ready(client)
        assert client.get("/healthz").status_code == 200
        for path in (
            "/v1/keys/t",
            "/v1/keys",
            "/v1/indexes/by_courier",
            "/v1/count",
            "/v1/status",
            "/v1/export",
            "/v1/changes",
            "/v1/snapshot",
            "/metrics",
            "/openapi.json",
        ):
            for headers in (
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": "s3cret-token"},
            ):
                denied = client.get(path, headers=headers)
                assert denied.status_code == 401, (path, headers, denied.status_code)
                assert denied.headers["www-authenticate"] == "Bearer"
        assert client.get("/v1/keys/t", headers=good).json()["value"] == 1
        assert client.get("/openapi.json", headers=good).json()["security"] == [{"bearer": []}]


def test_a_store_that_cannot_start_fails_health_with_the_reason(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1, compact=False)
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s")) as client:
        deadline = time.monotonic() + 30
        while (health := client.get("/healthz")).status_code == 200:
            assert time.monotonic() < deadline, "healthz still 200 after 30s"
            time.sleep(0.02)
        assert health.status_code == 503
        assert health.json()["error"].startswith("TopicNotCompacted"), health.text
        assert client.get("/readyz").status_code == 503
        status = client.get("/v1/status").json()
        assert status["ready"] is False and "not compact:" in status["start_error"], status


def test_an_export_abandoned_by_its_client_releases_the_store(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"x{i:05d}", {"pad": "p" * 200}) for i in range(20_000)])
    settings = ServerSettings(export_chunk=10)
    path = tmp_path / "s"
    with running_server(served_store(topic, kafka_bootstrap, path), settings) as client:
        wait_ready(client)
        with client.stream("GET", "/v1/export") as response:
            first = next(response.iter_lines())
            assert orjson.loads(first)["key"] == "x00000"
        # The client hung up after one line; the server must still answer and stop cleanly.
        assert client.get("/v1/count").json() == {"count": 20_000}
    # Stopping closed the store: no iterator kept RocksDB's lock, so it opens again.
    with GlobalStore(topic, kafka_bootstrap, path) as again:
        assert again.count() == 20_000


def test_an_undecodable_value_is_reported_with_its_record_counted_and_paged_past(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a-good", 1)])
    produce_raw(kafka_bootstrap, topic, b"b-bad", b"{not json")
    produce(kafka_bootstrap, topic, [("c-good", 3)])
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s")) as client:
        wait_ready(client)
        bad = client.get("/v1/keys/b-bad")
        assert bad.status_code == 500, bad.text
        assert "InvalidValue" in bad.json()["error"] and "offset 1" in bad.json()["error"]
        assert client.get("/v1/keys/a-good").json()["value"] == 1
        listed = client.get("/v1/keys?limit=1")
        assert listed.status_code == 200 and listed.json()["items"][0]["key"] == "a-good"
        after = client.get(f"/v1/keys?limit=1&cursor={listed.json()['cursor']}").json()
        assert after["items"] == [] and after["invalid"][0]["key"] == "b-bad"
        assert (after["invalid"][0]["partition"], after["invalid"][0]["offset"]) == (0, 1)
        last = client.get(f"/v1/keys?limit=1&cursor={after['cursor']}").json()
        assert last["items"][0]["key"] == "c-good" and last["cursor"] is None
        lines = [orjson.loads(line) for line in client.get("/v1/export").text.splitlines()]
        assert lines[0] == {"key": "a-good", "value": 1}
        assert lines[1]["error"].startswith("InvalidValue") and lines[1]["offset"] == 1, lines
        assert lines[2] == {"key": "c-good", "value": 3}
        # Counted: the get, the page and the export.
        assert "globalstore_decode_errors_total 3.0" in client.get("/metrics").text


def test_no_broker_at_start_keeps_the_server_alive_not_ready_and_saying_why(
    tmp_path: Path,
) -> None:
    with (
        closed_port() as port,
        running_server(served_store("t", f"127.0.0.1:{port}", tmp_path / "s")) as client,
    ):
        nowhere = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while not (status := client.get("/v1/status").json())["last_error"]:
            assert time.monotonic() < deadline, f"no error reported within 30s: {status}"
            time.sleep(0.05)
        assert nowhere in status["last_error"] or "Connect" in status["last_error"], status
        assert status["ready"] is False and status["start_error"] is None, status
        assert client.get("/healthz").status_code == 200  # retrying, not failed
        assert client.get("/readyz").status_code == 503
        assert client.get("/v1/count").status_code == 503


def test_pages_stop_at_the_byte_cap_and_the_cursor_continues_exactly(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=3)
    values = {f"p{i:03d}": "v" * (500 + 37 * i) for i in range(120)}
    values["p060"] = "w" * 50_000  # bigger than a whole page: it comes alone
    produce(kafka_bootstrap, topic, list(values.items()))
    cap = 20_000
    settings = ServerSettings(max_page_bytes=cap)
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s"), settings) as client:
        wait_ready(client)
        pages: list[list[dict[str, str]]] = []
        cursor = None
        while True:
            query = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            response = client.get("/v1/keys", params=query)
            items = response.json()["items"]
            assert len(response.content) <= cap + 100 or len(items) == 1, len(response.content)
            pages.append(items)
            cursor = response.json()["cursor"]
            if cursor is None:
                break
    seen = [item["key"] for page in pages for item in page]
    assert seen == sorted(values), "a key skipped, repeated or out of order"
    assert all(item["value"] == values[item["key"]] for page in pages for item in page)
    assert [item["key"] for item in pages[_page_of(pages, "p060")]] == ["p060"]
    for page, following in itertools.pairwise(pages):
        # Each page is as full as the cap allows: the next item would not have fitted.
        size = sum(len(orjson.dumps(item)) + 1 for item in page)
        assert size + len(orjson.dumps(following[0])) > cap, (page[0]["key"], size)


def _page_of(pages: list[list[dict[str, str]]], key: str) -> int:
    return next(n for n, page in enumerate(pages) if any(item["key"] == key for item in page))


def test_exports_beyond_the_cap_get_503_and_a_client_that_stops_reading_is_dropped(
    kafka_bootstrap: str, make_topic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(partitions=2)
    produce_incompressible(kafka_bootstrap, topic, 3000)  # a 12 MB export
    settings = ServerSettings(max_exports=1, idle_timeout=5)
    running = 'globalstore_http_streams{route="export"}'
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s"), settings) as client:
        wait_ready(client)
        caplog.set_level(logging.WARNING, logger="globalstore")
        held = raw_get(client, "/v1/export")  # reads nothing: the server's send blocks
        eventually(lambda: metric(client, running) == 1, 30, lambda: metric(client, running))
        for wait in (0.0, 0.5):
            began = time.monotonic()
            busy = client.get("/v1/export", params={"wait": wait})
            waited = time.monotonic() - began
            assert busy.status_code == 503, busy.text[:200]
            assert busy.headers["retry-after"] == "1" and "export" in busy.json()["error"]
            assert wait <= waited < wait + 3, (wait, waited)  # its own wait, not the maximum
        eventually(lambda: metric(client, running) == 0, 30, lambda: metric(client, running))
        cut = read_to_end(held)  # what the buffers held, then the server hung up
        held.close()
        assert not cut.endswith(b"0\r\n\r\n") and len(cut) < 6_000_000, len(cut)
        assert "export: dropped a client that read nothing for 5s" in caplog.text
        whole = client.get("/v1/export")  # the slot is free again
        assert whole.status_code == 200 and len(whole.text.splitlines()) == 3000
        counted = 'globalstore_http_requests_total{route="export",status="%d"}'
        assert metric(client, counted % 200) == 2 and metric(client, counted % 503) == 2
