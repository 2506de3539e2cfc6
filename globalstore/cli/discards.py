"""What opening a store with a command's options would throw away; refused unless asked.

The library's StoreConfig is declarative: a store opened without one of its indexes (or
with another version of it) drops that index, one opened without its ttl drops its time
index, one opened without its history its versions, and one opened with another transform
is rebuilt from the topic. In an application that is a change of its code; from the shell
it is nearly always a forgotten option, and a large store takes minutes to build again. So
store commands refuse it unless --redefine.

A command that only reads (status, quarantine, get, scan, count) needs none of them: it
takes the ttl, history and invalid_values the store records where no option gives them,
and, where the store has indexes or a transform whose functions no option gives, answers
from its files as they are (`recorded`). It refuses only options given that disagree with
the store.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from globalstore.cli.errors import UserError
from globalstore.config import OnInvalidValue, StoreConfig
from globalstore.errors import StorageError
from globalstore.shaping import history, quarantine
from globalstore.shaping.transform import rebuild_reason
from globalstore.storage import Storage
from globalstore.storage.index_defs import reconcile
from globalstore.storage.lock import DirLock
from globalstore.storage.meta import Meta

__all__ = ["RECORDED", "discards", "recorded", "refuse_discarding"]

# The options that say what a store holds, which a command that only reads may leave out.
RECORDED = frozenset({"history", "index", "invalid_values", "transform", "ttl"})


def discards(meta: Meta, config: StoreConfig) -> list[str]:
    """What a store whose meta is `meta` loses when opened with `config`, a phrase each."""
    lost = []
    reason = (
        rebuild_reason(meta, config)
        or quarantine.rebuild_reason(meta, config)
        or history.rebuild_reason(meta, config)
    )
    if reason is not None:
        lost.append(f"every value, rebuilt from the topic: {reason}")
    wanted = config.index_definitions()
    dropped = reconcile(meta.indexes, meta.index_next_id, wanted, empty=False).dropped
    for name, old in sorted(dropped.items()):
        now = "not given" if name not in wanted else f"given as version {wanted[name]}"
        lost.append(f"index {name!r} version {old.version} ({now})")
    if meta.ttl_ms is not None and config.ttl is None:
        lost.append(f"the time index of its ttl ({meta.ttl_ms / 1000:g} s; no --ttl given)")
    if meta.history_ms is not None and config.history is None:
        lost.append(f"its history ({meta.history_ms / 1000:g} s; no --history given)")
    return lost


def recorded(config: StoreConfig, given: frozenset[str]) -> StoreConfig | None:
    """`config` with the settings the store at config.path records where `given` (of
    RECORDED) names no option: its ttl and invalid_values. None when it still needs what
    no option gives (the functions of its indexes or transform): a reader then reads its
    files. UserError when options given disagree with the store; StoreLocked if a process
    holds it."""
    if not (Path(config.path) / "db" / "CURRENT").exists():
        return config
    lock = DirLock(Path(config.path))
    try:
        meta = _meta(config)
    finally:
        lock.release()
    if meta is None:
        return config  # unreadable: opening it rebuilds it, whatever the options
    if "invalid_values" not in given:
        stored = OnInvalidValue(meta.invalid_values or OnInvalidValue.STORE.value)
        config = dataclasses.replace(config, invalid_values=stored)
    if "ttl" not in given and meta.ttl_ms is not None:
        config = dataclasses.replace(config, ttl=meta.ttl_ms / 1000)
    if "history" not in given and meta.history_ms is not None:
        config = dataclasses.replace(config, history=meta.history_ms / 1000)
    lost = discards(meta, config)
    if not lost:
        return config
    if given & RECORDED:
        raise UserError(_refusal(config, lost))
    return None


def refuse_discarding(config: StoreConfig) -> None:
    """UserError if opening the store at config.path with `config` would discard what
    `discards` names; StoreLocked if a process holds the store (it then discards nothing,
    and queries can look in read-only)."""
    if not (Path(config.path) / "db" / "CURRENT").exists():
        return  # no store yet: nothing to lose
    lock = DirLock(Path(config.path))
    try:
        lost = _discarded_by(config)
    finally:
        lock.release()
    if lost:
        raise UserError(_refusal(config, lost))


def _refusal(config: StoreConfig, lost: list[str]) -> str:
    return (
        f"opening {config.path} with these options would discard "
        + "; ".join(lost)
        + ". Give the store's --index, --index-version, --ttl, --history, --transform and "
        "--invalid-values as it was written with, or --redefine to discard them."
    )


def _discarded_by(config: StoreConfig) -> list[str]:
    """`discards` of the store at config.path; nothing when it cannot be read: opening it
    rebuilds a damaged store anyway (with a WARNING saying why), whatever the options."""
    meta = _meta(config)
    return [] if meta is None else discards(meta, config)


def _meta(config: StoreConfig) -> Meta | None:
    """The meta of the store at config.path; None when it cannot be read."""
    try:
        storage = Storage(config.path, config.rocksdb, read_only=True)
    except StorageError:
        return None
    try:
        return storage.read_meta()
    except StorageError:  # DamagedLayoutError: meta entries that do not parse
        return None
    finally:
        storage.close()
