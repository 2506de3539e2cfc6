"""The writer process SharedStore.with_writer() starts (`python -P -m
globalstore.stores.writer_main`): a GlobalStore that restores and follows the topic, with no
reader thread of the application to wait behind for the GIL.

Its settings arrive as one line on standard input (a Handover: handover.py; so the Kafka
credentials appear in no command line, no environment and no file; each function is checked
to come from the file the parent named), and standard input stays open as its lifeline
(lifeline.py), watched from the start: when it ends, because the parent closed it or died
(SIGKILL included), while restoring or following, the store closes and the process exits.
It prints "ready" on standard output once the store is restored, and exits (status 1) if its
store stops on an error after that, so that the parent starts another. Its log goes to
standard error, one record a line (its further lines indented, so no message can pass for a
record of its own), for the parent to pass on to its own log.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from types import FrameType
from typing import NoReturn

from globalstore.errors import GlobalStoreError, StoreFailed
from globalstore.status import State
from globalstore.stores.global_store import GlobalStore
from globalstore.stores.handover import Handover
from globalstore.stores.lifeline import end_with_parent
from globalstore.stores.writer_process import READY

__all__ = ["main"]

_LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
_LOOK_S = 0.5  # how often a ready writer looks whether its store has stopped on an error


def main() -> None:
    """Follow the topic until standard input ends, SIGTERM comes or the store fails."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneRecordALine(_LOG_FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    signal.signal(signal.SIGTERM, _stop)
    try:
        spec = Handover.decode(sys.stdin.readline())
        end_with_parent(sys.stdin.fileno(), "the process that started this writer")
        store = GlobalStore(
            spec.topic,
            spec.bootstrap_servers or "",
            spec.path,
            kafka_config=spec.kafka_config,
            **spec.store_settings(),
        )
    except (GlobalStoreError, ValueError) as exc:  # a function that does not import, ...
        _say(exc)
    try:
        # No deadline here: the parent's start() decides how long it waits.
        store.start(wait=False).wait_until_ready()
        print(READY, flush=True)
        while (status := store.status()).state is not State.FAILED:
            time.sleep(_LOOK_S)
        # Ended, the parent starts another writer, which restores or heals from the topic.
        _say(StoreFailed(f"the store stopped: {status.last_error}"))
    except GlobalStoreError as exc:
        _say(exc)
    finally:
        store.close()


class _OneRecordALine(logging.Formatter):
    """A record's further lines (a traceback, a message with newlines) indented: the parent
    reads a line that starts with a level name as a new record."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\n", "\n  ")


def _say(exc: Exception) -> NoReturn:
    """Exit with `exc` logged in one line, which the parent's start() raises."""
    logging.getLogger(__name__).error("%s: %s", type(exc).__name__, exc)
    raise SystemExit(1) from None


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)  # through main()'s finally: the store closes


if __name__ == "__main__":
    main()
