"""max_staleness on a real broker: a store whose follower is held up (here by a listener that
keeps it in on_changes) stops saying it is ready once it has not known itself at the topic's
end for longer than the bound, /readyz says so with the reason, and all comes back once it
follows again. Without a bound, the same store stays ready but is not reported fresh."""

from __future__ import annotations

import warnings
from pathlib import Path

from globalstore import GlobalStore
from globalstore.server import ServedStore, create_app
from globalstore.status import State
from tests.integration.store_support import produce
from tests.unit.stores.test_freshness import HeldUp
from tests.waiting import eventually

with warnings.catch_warnings():  # starlette's notice about the httpx it uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


def test_a_held_up_follower_is_stale_and_not_ready(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", 1)])
    listener = HeldUp()
    store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[listener],
                        max_staleness=2.0)  # fmt: skip
    app = create_app(ServedStore.of(store.start(60)))
    with TestClient(app, base_url="http://localhost") as client:  # a Host serve answers
        try:
            eventually(lambda: store.status().fresh, 30, store.status)
            assert client.get("/readyz").status_code == 200
            listener.hold.set()
            produce(kafka_bootstrap, topic, [("b", 2)])
            eventually(lambda: store.status().stale is not None, 30, store.status)
            status = store.status()
            assert status.state is State.RUNNING and not status.ready and not status.fresh
            ready = client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["status"] == "stale"
            assert "max_staleness 2 s" in ready.json()["reason"]
            assert "globalstore_fresh 0.0" in client.get("/metrics").text
            listener.hold.clear()
            eventually(lambda: store.status().ready, 30, store.status)
            assert store.status().fresh and client.get("/readyz").status_code == 200
        finally:
            listener.hold.clear()


def test_without_a_bound_it_stays_ready_but_not_fresh(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    listener = HeldUp()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[listener]) as store:
        try:
            eventually(lambda: store.status().fresh, 30, store.status)
            listener.hold.set()
            produce(kafka_bootstrap, topic, [("b", 2)])
            eventually(lambda: not store.status().fresh, 30, store.status)
            assert store.status().ready
        finally:
            listener.hold.clear()
