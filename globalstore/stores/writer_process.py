"""The writer process of SharedStore.with_writer(): started with the store, started again if
it dies, stopped with the store.

Why a process: a follower thread shares the GIL with the application's threads, and readers
that keep the GIL busy delay it for as long as they read (docs/performance.md, "The ceiling
of any in-process follower"). In a process of its own the follower waits for nobody, and the
readers catch up with it as they read (shared_store.py).

The child (writer_main.py) gets its settings as one line on its standard input (a
Handover: handover.py), which then stays open as its lifeline (lifeline.py): the child ends
when it closes, so it never outlives this process, however this one ends. Functions
(transform, indexes, converters) travel by import name, so they must be module-level
functions the child can import, from the same file as here. The child's log lines are passed
on to the logger `globalstore.writer` at their own level.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from globalstore.config import StoreConfig, StoreSettings
from globalstore.errors import StoreFailed
from globalstore.stores.handover import Handover, child_command, child_environment

__all__ = ["READY", "WriterProcess", "writer_spec"]

log = logging.getLogger("globalstore.writer")

READY = "ready"  # what the child prints once the store is ready

_KEPT_LINES = 20  # of the child's log, for the error of a child that never got ready
_STOP_S = 30.0  # a closing child's time to close its store before it is killed
_MAX_PAUSE_S = 30.0  # longest pause between two restarts


def writer_spec(
    topic: str,
    bootstrap_servers: str,
    path: str | Path,
    kafka_config: Mapping[str, Any] | None,
    settings: StoreSettings,
) -> Handover:
    """What the writer process starts from. Checked here, as GlobalStore checks them, so a
    wrong setting fails in the caller; also ConfigurationError for a function the child
    cannot import by name."""
    given: dict[str, Any] = dict(settings)
    StoreConfig(topic, bootstrap_servers, Path(path), kafka_config=kafka_config or {}, **given)
    return Handover.of(topic, bootstrap_servers, path, kafka_config, settings)


class WriterProcess:
    """The child that writes the store: start() it, check() for a failed first start, stop()."""

    def __init__(self, spec: Handover) -> None:
        """`spec` as writer_spec() makes it."""
        self._spec = spec
        self._lock = threading.Lock()  # around starting and stopping a child
        self._child: subprocess.Popen[str] | None = None
        self._stopping = threading.Event()
        self._lines: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)
        self._was_ready = False
        self._restarts = 0  # since a child was last ready: the pause before the next grows
        self._failure: str | None = None
        self._told: Callable[[], None] = lambda: None

    def start(self, told: Callable[[], None]) -> None:
        """Start the child unless one runs; `told()` is called when a child that was never
        ready exits (check() then raises)."""
        with self._lock:
            if self._child is not None and self._child.poll() is None:
                return
            self._told, self._failure = told, None
            self._stopping.clear()
            self._spawn()

    def check(self) -> None:
        """StoreFailed if the child exited before the store was ever ready, with its last
        log lines (a wrong setting, a topic that is not compacted, ...)."""
        if self._failure is not None:
            raise StoreFailed(self._failure)

    def stop(self) -> None:
        """Close the child's standard input (it closes the store and exits), and wait for it:
        killed after 30 s. Idempotent."""
        with self._lock:
            self._stopping.set()
            child, self._child = self._child, None
        if child is None:
            return
        with contextlib.suppress(OSError):  # it has gone already
            child.stdin.close()  # type: ignore[union-attr]
        try:
            child.wait(_STOP_S)
        except subprocess.TimeoutExpired:
            log.error("the writer process (pid %d) did not stop in %gs: killed", child.pid, _STOP_S)
            child.kill()
            child.wait()

    def _spawn(self) -> None:
        """A new child, told its settings; threads pass its log on and watch it end."""
        child = subprocess.Popen(
            child_command("globalstore.stores.writer_main"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # Ctrl-C reaches this process, which stops the child
            env=child_environment(),
        )
        child.stdin.write(self._spec.encode() + "\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        self._child = child
        logging_thread = threading.Thread(
            target=self._pass_log_on, args=(child,), name="globalstore-writer-log", daemon=True
        )
        logging_thread.start()
        threading.Thread(
            target=self._watch,
            args=(child, logging_thread),
            name="globalstore-writer-watch",
            daemon=True,
        ).start()
        log.info("started the writer process (pid %d) for %s", child.pid, self._spec.path)

    def _pass_log_on(self, child: subprocess.Popen[str]) -> None:
        """The child's log lines into this process's log, each at the level it names (a
        traceback's lines at the level of the record they belong to)."""
        level = logging.INFO
        for line in _lines_of(child.stderr):
            named = logging.getLevelName(line.partition(" ")[0])
            level = named if isinstance(named, int) else level
            self._lines.append(line)
            log.log(level, "writer %d: %s", child.pid, line)

    def _watch(self, child: subprocess.Popen[str], logging_thread: threading.Thread) -> None:
        """Until the child ends: note when it is ready; then start another, unless it was
        stopped or never got ready (a restart would fail the same way)."""
        for line in _lines_of(child.stdout):
            if line == READY:
                self._was_ready, self._restarts = True, 0
        code = child.wait()
        logging_thread.join()
        if self._stopping.is_set():
            return
        if not self._was_ready:
            errors = [line for line in self._lines if line.startswith("ERROR ")]
            said = errors[-1] if errors else " | ".join(self._lines)[-2000:]
            self._failure = f"the writer process exited ({code}) before the store was ready: {said}"
            self._told()
            return
        pause = min(_MAX_PAUSE_S, 2.0**self._restarts)
        self._restarts += 1
        log.error("the writer process (pid %d) exited (%d): another in %gs", child.pid, code, pause)
        if self._stopping.wait(pause):
            return
        with self._lock:
            if not self._stopping.is_set():
                self._spawn()


def _lines_of(stream: IO[str] | None) -> Iterator[str]:
    """The lines of a child's pipe, without their line ends, as they come."""
    for line in stream or ():
        yield line.rstrip("\n")
