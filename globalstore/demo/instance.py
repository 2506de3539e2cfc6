"""One application instance of the demo: restore a GlobalStore and describe what it holds.

`globalstore.demo.run` runs this in two spawned processes, so each instance has its own consumer,
RocksDB database and directory lock, exactly as two deployed instances would.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from globalstore.stores.global_store import GlobalStore

__all__ = ["InstanceReport", "content_digest", "restore_and_report"]


@dataclass(frozen=True)
class InstanceReport:
    """What one demo instance restored: its key count, a digest of its content, sample values."""

    pid: int
    count: int
    digest: str
    samples: dict[str, Any]  # sample key -> its value (None: no such key)
    restore_seconds: float


def restore_and_report(
    topic: str, bootstrap_servers: str, path: Path, sample_keys: tuple[str, ...]
) -> InstanceReport:
    """Restore `topic` into a store at `path` (run in a child process) and describe it."""
    started = time.monotonic()
    with GlobalStore(topic=topic, bootstrap_servers=bootstrap_servers, path=path) as store:
        restored = time.monotonic() - started
        return InstanceReport(
            pid=os.getpid(),
            count=store.count(),
            digest=content_digest(store.items()),
            samples={key: store.get(key) for key in sample_keys},
            restore_seconds=restored,
        )


def content_digest(items: Iterable[tuple[str, Any]]) -> str:
    """sha256 over every key and value, the value re-encoded with sorted fields.

    Given in key order (a store's items() iterates so), two stores holding the same content
    give the same digest whatever order their records arrived in.
    """
    digest = hashlib.sha256()
    for key, value in items:
        encoded = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        digest.update(key.encode() + b"\0" + encoded + b"\n")
    return digest.hexdigest()
