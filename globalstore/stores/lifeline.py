"""The one lifeline of every process the project starts for a store: the writer process of
SharedStore.with_writer() and the workers of `serve --workers`.

The child holds the read end of a pipe whose write end only its parent holds (the writer
process: its standard input; a worker: the pipe multiprocessing gives every child it
spawns). The pipe reads end-of-file once the parent closes it or dies, however it dies
(SIGKILL included), at any moment: while the child restores, while the broker is down,
while it follows. The child then sends itself SIGTERM, so it stops as on any SIGTERM: its
store closes, its locks and its port are freed.

Why a pipe rather than the kernel's parent-death signal: that signal follows the parent
*thread* that started the child, and a with_writer() child is started again from a thread
that ends right after; a pipe ends only with the process.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

__all__ = ["end_with_parent"]

log = logging.getLogger(__name__)


def end_with_parent(pipe: int, parent: str) -> threading.Thread:
    """Watch `pipe` (a file descriptor) on a daemon thread: at its end of file, or an error
    reading it, this process gets SIGTERM. `parent` names the parent in the log line."""
    thread = threading.Thread(
        target=_watch, args=(pipe, parent), name="globalstore-lifeline", daemon=True
    )
    thread.start()
    return thread


def _watch(pipe: int, parent: str) -> None:
    while True:
        try:
            if not os.read(pipe, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    log.warning("%s is gone: this process stops", parent)
    os.kill(os.getpid(), signal.SIGTERM)
