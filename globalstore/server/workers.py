"""`globalstore serve --workers N`: this process writes the store (it restores and follows
the topic, and nothing else), N uvicorn worker processes answer HTTP from SharedStore readers
of the same directory.

Why: in one process the follower thread waits for the GIL behind the request handlers, one
switch interval (5 ms) at a time, so a server answering at its full rate falls tens of
milliseconds behind (docs/performance.md, "Following and freshness under load"). Here the
writer's process is idle but for following, and each worker catches up with it as it reads.

uvicorn starts each worker with multiprocessing (spawn), handing it its configuration
through the pipe the worker is spawned with; the application travels there too, as the
factory worker_app bound to the store's Handover (stores/handover.py, as with_writer()'s
writer gets it): the store's settings, the Kafka settings and the token as this process read
them. So no secret is in an environment variable, and no worker reads the token file or the
Kafka settings file again: every worker, restarted ones too, serves with what this process
read. The Kafka settings are for the change feed alone, which a worker reads from the topic
(stores/topic_changes.py). That pipe is also each worker's lifeline (stores/lifeline.py).
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import socket
from typing import Any

from uvicorn.supervisors import Multiprocess

from globalstore.config import StoreConfig
from globalstore.server.app import create_app
from globalstore.server.guard import Guard
from globalstore.server.run import uvicorn_config
from globalstore.server.served import ServedStore
from globalstore.server.settings import ServerSettings
from globalstore.stores.handover import Handover
from globalstore.stores.lifeline import end_with_parent
from globalstore.stores.shared_store import SharedStore

__all__ = ["end_with_serve_process", "run_workers", "worker_app", "worker_handover"]


def worker_handover(config: StoreConfig, settings: ServerSettings) -> Handover:
    """What the serve process hands its workers: the store's path, value format,
    converters (by import name), max_staleness and Kafka settings, and the API's settings
    with the token."""
    store: dict[str, Any] = {
        "value_format": config.value_format,
        "converters": dict(config.converters),
        "max_staleness": config.max_staleness,
    }
    api = dataclasses.asdict(settings)
    return Handover.of(
        config.topic, config.bootstrap_servers, config.path, config.kafka_config, store, api
    )


def run_workers(
    served: ServedStore,
    handover: Handover,
    workers: int,
    listening: socket.socket,
    graceful_seconds: int,
) -> None:
    """Start the writer, then serve on `listening` (run.listen()) with `workers` processes
    until SIGTERM or SIGINT; the workers stop first (in-flight requests finish), then the
    writer closes the store. A worker ends by itself if this process dies (lifeline.py)."""
    app = functools.partial(worker_app, handover.encode())
    # multiprocessing starts each worker with `python -c`, which would put the working
    # directory first on its import path until the worker takes this process's path: as
    # `-P` does for the writer of with_writer(), keep it out (and out of what they start).
    os.environ["PYTHONSAFEPATH"] = "1"
    host, port = listening.getsockname()[:2]
    config = uvicorn_config(app, host, port, graceful_seconds, factory=True, workers=workers)
    served.start()
    try:
        Multiprocess(config, sockets=[listening]).run()
    finally:
        served.close()


def worker_app(handover: str) -> Guard:
    """The API of one worker process: a SharedStore of the writer's directory, from the
    serve process's Handover (encoded)."""
    end_with_serve_process()
    given = Handover.decode(handover)
    store = SharedStore(
        given.path,
        bootstrap_servers=given.bootstrap_servers,
        kafka_config=given.kafka_config,
        **given.store_settings(),
    )
    settings = ServerSettings(**{**given.extra, "snapshots": False})
    return create_app(ServedStore.of(store), settings)


def end_with_serve_process() -> None:
    """This worker ends when the serve process does (lifeline.py): uvicorn starts workers
    with multiprocessing, which leaves each one the read end of a pipe only the serve
    process holds open."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        raise RuntimeError("a worker of serve --workers must be started by the serve process")
    end_with_parent(parent.sentinel, f"the serve process (pid {parent.pid})")
