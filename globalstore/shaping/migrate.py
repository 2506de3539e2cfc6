"""On-disk layout versions, value format conversion, and how a store moves to the current ones.

Layouts (the meta column family's "layout" entry):
    0  value = the record's JSON bytes, nothing else (no timestamp, no origin)
    1  value = codec.HEADER (layout, value format, timestamp, partition, offset) + JSON bytes

The "layout" entry names the oldest layout a reader must understand to read the store, so it
is raised BEFORE the first value of a newer layout is written (begin()). A store half-way
through a migration therefore says the new layout, plus "migrate.from" for the old values it
may still hold: an older version opening it sees a layout it does not know and rebuilds from
the topic (or refuses), instead of misreading the new values. The same holds for value
formats: "value_format" is written before the first converted value is.

Upgrades are both lazy and eager, as Kafka's timestamped-store upgrade was:
  * lazy: codec.decode reads either layout (a v1 value starts with 0x01, JSON never does),
    converters.decoder reads older value formats, and every record applied after the upgrade
    is written in the new layout, so an old store serves queries at once;
  * eager: Migration.step() rewrites the remaining old values in chunks bounded by count and
    time, from a cursor kept in the meta column family and written in the same batch as the
    chunk, so a crash (even kill -9) resumes where it stopped. It runs on the store thread
    between batches, so it never races the follower. Layout first, then value format.

A layout this version does not know (a newer one, garbage) is never read: the store is
rebuilt from the topic instead (plan.py), or refused if so configured.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from globalstore.codec import LAYOUT_VERSION, UNKNOWN, pack
from globalstore.converters import ValueFormats
from globalstore.errors import ConversionFailed
from globalstore.storage import Storage
from globalstore.storage.meta import (
    K_CONVERT_CURSOR,
    K_LAYOUT,
    K_MIGRATE_CURSOR,
    K_MIGRATE_FROM,
    K_VALUE_FORMAT,
    Meta,
)

__all__ = ["CONVERTERS", "KNOWN_LAYOUTS", "Limits", "Migration", "unreadable_reason"]

log = logging.getLogger(__name__)


def _v0_to_v1(raw: bytes) -> bytes:
    # Layout 0 never recorded where a value came from: mark it unknown, keep the bytes.
    return pack(raw, UNKNOWN, UNKNOWN, UNKNOWN)


# from-version -> converter of one raw value to the next version's layout.
CONVERTERS: dict[int, Callable[[bytes], bytes]] = {0: _v0_to_v1}
# Every layout this version can open: the current one, and those it can migrate from.
KNOWN_LAYOUTS = frozenset({LAYOUT_VERSION, *CONVERTERS})


@dataclass(frozen=True)
class Limits:
    """How much one eager step may do between two follow batches."""

    keys: int = 2_000
    seconds: float = 0.02


def unreadable_reason(meta: Meta, formats: ValueFormats) -> str | None:
    """Why this version cannot read a store with this meta, or None if it can (now or after
    migrating)."""
    for layout in (meta.layout, meta.migrate_from):
        if layout is not None and layout not in KNOWN_LAYOUTS:
            known = ", ".join(str(v) for v in sorted(KNOWN_LAYOUTS))
            return f"unknown store layout version {layout} (this version reads {known})"
    if meta.value_format is not None and meta.value_format > formats.current:
        return (
            f"store values were converted to value format {meta.value_format}, newer than "
            f"the value_format {formats.current} this store reads"
        )
    return None


def _old_layout_to_current(key: bytes, raw: bytes, start: int) -> bytes:
    if raw[:1] == bytes([LAYOUT_VERSION]):
        return raw
    for layout in range(start, LAYOUT_VERSION):
        raw = CONVERTERS[layout](raw)
    return raw


class Migration:
    """A store's eager conversions: layout, then value format. Create it after the store's
    meta is loaded, call begin() before any record is applied, then step() between batches."""

    def __init__(self, storage: Storage, formats: ValueFormats, topic: str) -> None:
        self.storage = storage
        self.formats = formats
        self.topic = topic
        self.converted = 0  # values rewritten since this start
        self.failures = 0  # values a converter raised on (kept as they were)
        self._converting = False

    def begin(self) -> None:
        """Record what readers must understand before writing anything that needs it."""
        storage, current = self.storage, self.formats.current
        meta = storage.read_meta()
        if meta.layout is not None and meta.layout < LAYOUT_VERSION:
            storage.write_values(
                [], {K_LAYOUT: str(LAYOUT_VERSION).encode(), K_MIGRATE_FROM: b"%d" % meta.layout}
            )
            log.info("store %s: migrating from layout %d", storage.path, meta.layout)
        self._converting = meta.converting
        if self.formats.converters and meta.value_format != current:
            storage.write_values([], {K_VALUE_FORMAT: b"%d" % current, K_CONVERT_CURSOR: b""})
            self._converting = True
            log.info("store %s: converting values to format %d", storage.path, current)

    @property
    def pending(self) -> bool:
        """Whether a layout migration or a value conversion is still to run."""
        return self.storage.state.migrate_from is not None or self._converting

    @property
    def describe(self) -> str | None:
        """What is being converted, for status, or None when nothing is."""
        if self.storage.state.migrate_from is not None:
            return f"layout {self.storage.state.migrate_from} -> {LAYOUT_VERSION}"
        if self._converting:
            return f"value format -> {self.formats.current}"
        return None

    def step(self, limits: Limits = Limits()) -> bool:
        """One bounded chunk of the pending conversion. True when nothing is left."""
        if self.storage.state.migrate_from is not None:
            self._layout_step(self.storage.state.migrate_from, limits)
        elif self._converting:
            self._format_step(limits)
        return not self.pending

    def _layout_step(self, start: int, limits: Limits) -> None:
        rewrite = functools.partial(_old_layout_to_current, start=start)
        if self._chunk(K_MIGRATE_CURSOR, rewrite, {K_MIGRATE_FROM: None}, limits):
            log.info("store %s migrated from layout %d", self.storage.path, start)

    def _format_step(self, limits: Limits) -> None:
        if self._chunk(K_CONVERT_CURSOR, self._convert, {}, limits):
            self._converting = False
            log.info(
                "store %s: values converted to format %d (%d kept as they were)",
                self.storage.path,
                self.formats.current,
                self.failures,
            )

    def run(self, limits: Limits = Limits()) -> None:
        """Convert everything in one go, outside the store thread (offline use)."""
        self.begin()
        while not self.step(limits):
            pass

    def _convert(self, key: bytes, raw: bytes) -> bytes | None:
        try:
            return self.formats.rewrite(raw, key, self.topic)
        except ConversionFailed as exc:
            self.failures += 1
            log.warning("kept the stored value as it was: %s", str(exc))
        return None

    def _chunk(
        self,
        cursor_key: bytes,
        rewrite: Callable[[bytes, bytes], bytes | None],
        finish: dict[bytes, bytes | None],
        limits: Limits,
    ) -> bool:
        """Rewrite values from the cursor on, up to the limits; the values and the new cursor
        (or `finish`, at the end) go in one batch. True when the end was reached."""
        storage = self.storage
        pairs = storage.keys_from(storage.get_meta(cursor_key), limits.keys)
        deadline = time.monotonic() + limits.seconds
        out: list[tuple[bytes, bytes]] = []
        done = 0
        for key, raw in pairs:
            new = rewrite(key, raw)
            if new is not None and new is not raw:
                out.append((key, new))
            done += 1
            if time.monotonic() >= deadline:
                break
        self.converted += len(out)
        if done == len(pairs) and len(pairs) < limits.keys:
            storage.write_values(out, {cursor_key: None, **finish})
            return True
        # The smallest key after the last one handled.
        storage.write_values(out, {cursor_key: pairs[done - 1][0] + b"\x00"})
        return False
