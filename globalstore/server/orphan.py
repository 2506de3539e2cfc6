"""A worker process of `serve --workers` that ends with its parent: when the parent dies
(SIGKILL included), the worker gets SIGTERM, stops serving and frees the port, rather than
answer 503 from a store nobody writes any more.

On Linux the kernel sends it (prctl PR_SET_PDEATHSIG); elsewhere, or if that call fails, a
thread looks at the parent's pid every second.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading

__all__ = ["end_with_parent"]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_LOOK_S = 1.0  # the watching thread's interval


def end_with_parent(parent: int) -> None:
    """Have this process receive SIGTERM once `parent` (its parent's pid when it was
    started) is no longer its parent; at once if that has already happened."""
    if not _death_signal():
        threading.Thread(target=_watch, args=(parent,), name="parent-watch", daemon=True).start()
    if os.getppid() != parent:  # it died before the death signal was asked for
        _terminate(parent)


def _death_signal() -> bool:
    """Ask the kernel for SIGTERM at the parent's death; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        threading.Event().wait(_LOOK_S)
    _terminate(parent)


def _terminate(parent: int) -> None:
    log.warning("the serve process (pid %d) is gone: this worker stops", parent)
    os.kill(os.getpid(), signal.SIGTERM)
