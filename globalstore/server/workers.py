"""`globalstore serve --workers N`: this process writes the store (it restores and follows
the topic, and nothing else), N uvicorn worker processes answer HTTP from SharedStore readers
of the same directory.

Why: in one process the follower thread waits for the GIL behind the request handlers, one
switch interval (5 ms) at a time, so a server answering at its full rate falls tens of
milliseconds behind (docs/performance.md, "Following and freshness under load"). Here the
writer's process is idle but for following, and each worker catches up with it as it reads.

uvicorn starts the workers by importing `worker_app` (a factory) in fresh processes; what they
need to open the store travels in an environment variable, never a secret the serve process
read from a file: each worker reads the token file and the Kafka settings file again
($GLOBALSTORE_TOKEN is inherited). The Kafka settings are for the change feed alone, which a
worker reads from the topic (stores/topic_changes.py).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import socket
from pathlib import Path
from typing import Any

from uvicorn.supervisors import Multiprocess

from globalstore.config import StoreConfig
from globalstore.converters import import_converter, import_name
from globalstore.kafka.settings import client_settings
from globalstore.server.app import create_app
from globalstore.server.guard import Guard, load_token
from globalstore.server.run import uvicorn_config
from globalstore.server.served import ServedStore
from globalstore.server.settings import ServerSettings
from globalstore.stores.lifeline import end_with_parent
from globalstore.stores.shared_store import SharedStore

__all__ = ["WorkerSpec", "run_workers", "worker_app"]

_SPEC_ENV = "GLOBALSTORE_SERVE_WORKER"


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to open the store and the API as the writer's process was told."""

    path: str
    value_format: int
    converters: dict[int, str]  # {from_version: "module:function"}
    token_file: str | None
    settings: dict[str, Any]  # ServerSettings without the token
    max_staleness: float | None = None
    bootstrap_servers: str | None = None
    kafka_pairs: dict[str, str] = dataclasses.field(default_factory=dict)  # --kafka-config
    kafka_config_file: str | None = None

    @classmethod
    def of(
        cls,
        config: StoreConfig,
        token_file: Path | None,
        settings: ServerSettings,
        kafka_given: tuple[dict[str, str], Path | None],
    ) -> WorkerSpec:
        """What the serve process passes its workers: the store's path, format and converters (by
        import name), the token file, the settings without the token, and the Kafka settings as
        given (`kafka_given`: the command line's pairs and the file's path)."""
        fields = dataclasses.asdict(settings)
        fields.pop("token")
        pairs, kafka_file = kafka_given
        return cls(
            str(config.path),
            config.value_format,
            {v: import_name(fn, f"converters[{v}]") for v, fn in config.converters.items()},
            None if token_file is None else str(token_file),
            fields,
            config.max_staleness,
            config.bootstrap_servers,
            pairs,
            None if kafka_file is None else str(kafka_file),
        )


def run_workers(
    served: ServedStore,
    spec: WorkerSpec,
    workers: int,
    listening: socket.socket,
    graceful_seconds: int,
) -> None:
    """Start the writer, then serve on `listening` (run.listen()) with `workers` processes
    until SIGTERM or SIGINT; the workers stop first (in-flight requests finish), then the
    writer closes the store. A worker ends by itself if this process dies (lifeline.py)."""
    os.environ[_SPEC_ENV] = json.dumps(dataclasses.asdict(spec))
    app = f"{__name__}:worker_app"
    host, port = listening.getsockname()[:2]
    config = uvicorn_config(app, host, port, graceful_seconds, factory=True, workers=workers)
    served.start()
    try:
        Multiprocess(config, sockets=[listening]).run()
    finally:
        served.close()


def worker_app() -> Guard:
    """The API of one worker process: a SharedStore of the writer's directory."""
    spec = WorkerSpec(**json.loads(os.environ[_SPEC_ENV]))
    end_with_serve_process()
    converters = {int(v): import_converter(name) for v, name in spec.converters.items()}
    store = SharedStore(
        spec.path,
        value_format=spec.value_format,
        converters=converters,
        max_staleness=spec.max_staleness,
        bootstrap_servers=spec.bootstrap_servers,
        kafka_config=client_settings(spec.kafka_pairs, spec.kafka_config_file),
    )
    token = load_token(None if spec.token_file is None else Path(spec.token_file))
    settings = ServerSettings(token=token, **{**spec.settings, "snapshots": False})
    return create_app(ServedStore.of(store), settings)


def end_with_serve_process() -> None:
    """This worker ends when the serve process does (lifeline.py): uvicorn starts workers
    with multiprocessing, which leaves each one the read end of a pipe only the serve
    process holds open."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        raise RuntimeError("a worker of serve --workers must be started by the serve process")
    end_with_parent(parent.sentinel, f"the serve process (pid {parent.pid})")
