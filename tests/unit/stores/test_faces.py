"""Every store face keeps the StoreReader contract, checked the way a caller's type checker
would check it, and the thread's states move only along the allowed arrows."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from mypy import api

from globalstore.status import State, enter

ROOT = Path(__file__).resolve().parents[3]

_CALLER = """
from globalstore import (
    FollowingStore, GlobalStore, ReadOnlyStore, SharedStore, StoreReader, SwitchingStore,
)
from globalstore.aio import AsyncStore
from globalstore.server.changes import ChangeSource

def read(store: StoreReader) -> None: ...
def serve(store: FollowingStore) -> None: ...
def stream(store: ChangeSource) -> None: ...

def check(
    live: GlobalStore, switching: SwitchingStore, view: ReadOnlyStore, shared: SharedStore,
    awaited: AsyncStore[GlobalStore], reader: StoreReader,
) -> None:
    for store in (live, switching, view, shared, awaited.sync):
        read(store)
        serve(store)
        stream(store)  # GET /v1/changes
"""


def test_every_face_implements_the_protocols(tmp_path: Path) -> None:
    caller = tmp_path / "caller.py"
    caller.write_text(_CALLER)
    out, err, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(caller)]
    )
    assert status == 0, out + err


def test_a_reader_that_only_reads_is_not_served(tmp_path: Path) -> None:
    # Not vacuous: the same check fails where a store lacks what the protocol asks.
    caller = tmp_path / "caller.py"
    caller.write_text(_CALLER + "    serve(reader)\n")
    out, _, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(caller)]
    )
    assert status == 1 and "FollowingStore" in out, out


def test_a_thread_moves_forward_or_stops() -> None:
    path = [State.CREATED, State.STARTING, State.RESTORING, State.RUNNING, State.CLOSED]
    for old, new in itertools.pairwise(path):
        assert enter(old, new) is new
    assert enter(State.RESTORING, State.FAILED) is State.FAILED


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (State.RUNNING, State.RESTORING),  # a thread never goes back
        (State.CREATED, State.RUNNING),  # nor skips the restore
        (State.FAILED, State.STARTING),  # a stopped thread stays stopped
        (State.RUNNING, State.REBUILDING),  # reported by the store, never entered
        (State.CREATED, State.OFFLINE),
    ],
)
def test_every_other_move_is_refused(old: State, new: State) -> None:
    with pytest.raises(ValueError, match=f"from {old.value} to {new.value}"):
        enter(old, new)


def test_states_still_equal_their_names() -> None:
    assert State.RUNNING == "running" and f"{State.OFFLINE}" == "offline"
