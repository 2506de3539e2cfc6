"""The states a store goes through, and the one place that says which may follow which.

    created ─► starting ─► restoring ─► running
       │           │            │           │
       └───────────┴─────┬──────┴───────────┘
                         ▼
                  failed | closed           (final)

The store thread moves along these arrows and nowhere else (checked by `enter`). Two more
states are only ever reported, never entered by a thread: "rebuilding" (GlobalStore, while
a copy is rebuilt beside the live one, which keeps serving) and "offline" (a ReadOnlyStore,
which reads files and follows nothing, and a SharedStore whose writer has gone quiet).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Delays", "Progress", "State", "enter"]


class State(enum.StrEnum):
    """A store's state; equal to its name as a string ("running"), as earlier versions had."""

    CREATED = "created"
    STARTING = "starting"  # reaching the broker, planning
    RESTORING = "restoring"
    RUNNING = "running"  # ready: restored to the captured end offsets, following
    FAILED = "failed"  # the thread stopped on an error
    CLOSED = "closed"  # the thread stopped because it was asked to
    REBUILDING = "rebuilding"  # reported: the live copy serves while another is rebuilt
    OFFLINE = "offline"  # reported: a read-only view of files, following nothing


_STOPPED = frozenset({State.FAILED, State.CLOSED})
_NEXT: dict[State, frozenset[State]] = {
    State.CREATED: frozenset({State.STARTING}) | _STOPPED,
    State.STARTING: frozenset({State.RESTORING}) | _STOPPED,
    State.RESTORING: frozenset({State.RUNNING}) | _STOPPED,
    State.RUNNING: _STOPPED,
}


def enter(old: State, new: State) -> State:
    """`new`, if a thread in state `old` may move to it; ValueError (a bug) otherwise."""
    if new not in _NEXT.get(old, frozenset()):
        raise ValueError(f"a store thread cannot go from {old.value} to {new.value}")
    return new


@dataclass(frozen=True)
class Progress:
    """A long job under way (a restore, a rebuild, a migration): how much is done and left,
    its rate over the last few seconds, and when it should end at that rate."""

    phase: str  # "restore", "rebuild" or "migration"
    # Restore and rebuild: offsets (a compacted topic holds fewer records than offsets, so
    # they read no more than this). Migration: values.
    done: int
    total: int
    left: int
    rate: float  # per second, over the last few seconds (the whole job before that)
    eta_seconds: float | None  # left / rate; None until a rate is known
    elapsed_seconds: float


@dataclass(frozen=True)
class Delays:
    """A histogram of record delays (seconds from a record's timestamp to a point: applied,
    visible): records counted at or below each bound (not cumulative; the last bound is
    infinite), their number and the sum of their delays."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: int
    sum_seconds: float
