"""On-disk layout versions and how a store moves from an old one to the current one.

Versions (the meta column family's "layout" entry):
    0  value = the record's JSON bytes, nothing else (no timestamp, no origin)
    1  value = codec.HEADER (layout, value format, timestamp, partition, offset) + JSON bytes

Upgrades are both lazy and eager, as Kafka's timestamped-store upgrade was:
  * lazy: codec.decode reads either layout (a v1 value starts with 0x01, JSON never does),
    and every record applied after the upgrade is written in the new layout, so an old store
    serves queries at once;
  * eager: step() converts the remaining old values in small chunks from a cursor kept in the
    meta column family, written in the same batch as the chunk, so a crash resumes where it
    stopped. It runs on the store thread between batches, so it never races the follower.
When no old value is left, the layout entry is set to the current version.

A layout that is neither current nor listed in CONVERTERS (a newer version, garbage) is never
read: the store is rebuilt from the topic instead (restore.plan).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from globalstore.codec import LAYOUT_VERSION, UNKNOWN, pack
from globalstore.meta import K_LAYOUT, K_MIGRATE_CURSOR
from globalstore.storage import Storage

log = logging.getLogger(__name__)

CHUNK = 1_000


def _v0_to_v1(raw: bytes) -> bytes:
    # Layout 0 never recorded where a value came from: mark it unknown, keep the bytes.
    return pack(raw, UNKNOWN, UNKNOWN, UNKNOWN)


# from-version -> converter of one raw value to the next version's layout.
CONVERTERS: dict[int, Callable[[bytes], bytes]] = {0: _v0_to_v1}


def _is_current(raw: bytes) -> bool:
    return raw[:1] == bytes([LAYOUT_VERSION])


def check_layout(layout: int) -> str | None:
    """None if a store of this layout can be opened (now or after migrating), else why not."""
    if layout == LAYOUT_VERSION or layout in CONVERTERS:
        return None
    return f"unknown store layout version {layout} (this version reads {LAYOUT_VERSION})"


def needs_migration(storage: Storage) -> bool:
    return storage.layout is not None and storage.layout != LAYOUT_VERSION


def step(storage: Storage, chunk: int = CHUNK) -> bool:
    """Convert up to `chunk` values from the saved cursor on. Returns True when finished."""
    layout = storage.layout
    if layout is None or layout == LAYOUT_VERSION:
        return True
    convert = CONVERTERS[layout]
    start = storage.get_meta(K_MIGRATE_CURSOR)
    pairs = storage.keys_from(start, chunk)
    converted = [(k, convert(v)) for k, v in pairs if not _is_current(v)]
    if len(pairs) < chunk:
        storage.write_values(
            converted, {K_LAYOUT: str(layout + 1).encode(), K_MIGRATE_CURSOR: None}
        )
        storage.set_layout(layout + 1)
        log.info("store %s migrated from layout %d to %d", storage.path, layout, layout + 1)
        return storage.layout == LAYOUT_VERSION
    cursor = pairs[-1][0] + b"\x00"  # the smallest key after the last one converted
    storage.write_values(converted, {K_MIGRATE_CURSOR: cursor})
    return False


def migrate_all(storage: Storage, chunk: int = CHUNK) -> None:
    """Eagerly convert the whole store in one go, outside the store thread (offline use)."""
    while not step(storage, chunk):
        pass
