"""The store behind the HTTP API: started in the background so the server answers probes (and
says "not ready") while it restores, with restore progress kept for status and metrics."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from globalstore.errors import GlobalStoreError, RetriableError
from globalstore.listeners import StoreListener
from globalstore.read.protocols import FollowingStore, serving

__all__ = ["RestoreProgress", "ServedStore"]

log = logging.getLogger(__name__)

_RETRY_PAUSE = 1.0


@dataclass(frozen=True)
class RestoreProgress:
    """How far the current (or last) restore got; all zero before one began."""

    records_to_restore: int
    records_restored: int
    start_offsets_total: int | None  # sum of the offsets the restore started from
    seconds: float
    done: bool

    @property
    def rate(self) -> float:
        """Records restored a second; 0.0 before any time passed."""
        return self.records_restored / self.seconds if self.seconds > 0 else 0.0


class _ProgressListener(StoreListener):
    """Counts what the store thread restores; read from request handlers."""

    def __init__(self) -> None:
        self.total = 0
        self.restored = 0
        self.start_total: int | None = None
        self.began: float | None = None
        self.ended: float | None = None

    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        self.total = sum(max(0, e - start_offsets.get(p, 0)) for p, e in end_offsets.items())
        self.start_total = sum(start_offsets.values())
        self.restored = 0
        self.began, self.ended = time.monotonic(), None

    def on_batch_restored(self, topic: str, positions: Mapping[int, int], records: int) -> None:
        self.restored += records

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        self.restored = total_records
        self.ended = time.monotonic()


class ServedStore:
    """Owns the store the server serves (a GlobalStore, or a SwitchingStore: any
    FollowingStore): start() returns at once and a thread restores;
    a retriable start failure (broker away) is retried, a fatal one is kept in `error`.

    `make_store` builds the (not started) store around the listener that tracks progress.
    ServedStore.of(store) serves a store built elsewhere (already started, or not)."""

    def __init__(
        self, make_store: Callable[[StoreListener], FollowingStore], start_timeout: float = 3600.0
    ) -> None:
        self._progress = _ProgressListener()
        self.store = make_store(self._progress)
        self.start_timeout = start_timeout
        self.error: GlobalStoreError | None = None
        self._stopping = threading.Event()
        self._starter: threading.Thread | None = None

    @classmethod
    def of(cls, store: FollowingStore) -> ServedStore:
        """A ServedStore of a store made already (its restore progress is then not counted)."""
        return cls(lambda _listener: store)

    def start(self) -> None:
        """Start the store on a thread of its own and return at once (retrying while the broker is
        away); nothing if it was started already."""
        if self._starter is not None or serving(self.store.status()):  # started elsewhere
            return
        self._starter = threading.Thread(target=self._start, name="globalstore-serve-start")
        self._starter.start()

    def _start(self) -> None:
        while not self._stopping.is_set():
            try:
                self.store.start(timeout=self.start_timeout)
                return
            except RetriableError as exc:
                if self._stopping.is_set():
                    return
                log.warning("store not started yet, retrying: %s", str(exc))
                self._stopping.wait(_RETRY_PAUSE)
            except GlobalStoreError as exc:
                if not self._stopping.is_set():
                    log.error("store cannot start: %s: %s", type(exc).__name__, str(exc))
                    self.error = exc
                return
            except Exception:
                if self._stopping.is_set():
                    return  # close() pulled the store from under start()
                raise

    def progress(self) -> RestoreProgress:
        """How far the current or last restore got; all zero before one began."""
        listener = self._progress
        began = listener.began
        if began is None:
            return RestoreProgress(0, 0, None, 0.0, False)
        until = listener.ended if listener.ended is not None else time.monotonic()
        return RestoreProgress(
            listener.total,
            listener.restored,
            listener.start_total,
            until - began,
            listener.ended is not None,
        )

    def close(self) -> None:
        """Stop a restore in progress, or following; close the store. Idempotent."""
        self._stopping.set()
        self.store.close()
        starter = self._starter
        if starter is not None:
            starter.join()
