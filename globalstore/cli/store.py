"""`globalstore restore|get|scan|count|status`: query a store from the shell.

Every command opens the store at --path, restores it up to the topic's current end (that is
what start() does) and then answers, so the answer is as fresh as the topic. `status
--offline` (and `status` when no broker answers) reads the store's own files instead. Results go to
stdout; progress and messages go to stderr.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import sys
from collections.abc import Mapping
from pathlib import Path

import click
import orjson

from globalstore.cli.progress import ProgressBar
from globalstore.cli.snapshot import install_snapshot
from globalstore.cli.target import StoreTarget, store_options
from globalstore.cli.watch import Watcher, watch
from globalstore.errors import BrokerUnavailable, InvalidValue
from globalstore.read.as_of import parse as parse_time
from globalstore.read.protocols import AsOf, StoreStatus
from globalstore.status import Progress, State
from globalstore.stores.global_store import GlobalStore
from globalstore.stores.read_only_store import ReadOnlyStore

__all__ = ["count", "get", "quarantine", "register", "restore", "scan", "status"]

_QUARANTINE_CHUNK = 16  # held records read at a time (each whole, however large)


def _inspect(path: Path) -> StoreStatus:
    with ReadOnlyStore(path) as view:
        return view.status()


@click.command()
@store_options
@click.option(
    "--from-snapshot",
    metavar="URL_OR_DIR",
    help="When --path is empty, start from this snapshot (a peer's GET /v1/snapshot URL or "
    "a `snapshot create` directory) and catch up from its offsets; if it does not fit the "
    "topic, a WARNING says why and the restore reads the whole topic.",
)
def restore(target: StoreTarget, from_snapshot: str | None) -> None:
    """Restore (or catch up) the store at --path to the topic's current end, then exit."""
    err = sys.stderr
    if from_snapshot is not None:
        install_snapshot(from_snapshot, target.config.path, err)
    progress = ProgressBar(err, tty=err.isatty())
    store = target.open(progress)
    with contextlib.closing(store):
        click.echo(f"ready: {store.count():,} keys, position {_offsets(store.position())}")


class _Time(click.ParamType):  # type: ignore[type-arg]
    """A time as --as-of takes it: RFC 3339 with a time zone, or epoch seconds."""

    name = "TIME"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> AsOf:
        if not isinstance(value, str):
            return value  # type: ignore[return-value]  # a default given as a time already
        try:
            return parse_time(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


_AS_OF = click.option(
    "--as-of",
    type=_Time(),
    help="Answer as of this time (RFC 3339 with a zone, or epoch seconds): needs a store "
    "kept with history; a time older than it can answer is refused, naming the oldest.",
)


@click.command()
@store_options
@click.option("--entry", is_flag=True, help="Also print the record's timestamp/partition/offset.")
@_AS_OF
@click.argument("key")
def get(
    target: StoreTarget,
    entry: bool,
    as_of: AsOf | None,
    key: str,
) -> None:
    """Print the JSON value of KEY; exit status 1 if the key is absent."""
    with contextlib.closing(target.open_for_queries()) as store:
        found = store.get_entry(key, as_of=as_of)
    if found is None:
        click.echo(f"key {key!r} not found", err=True)
        sys.exit(1)
    shown = dataclasses.asdict(found) if entry else found.value
    click.echo(orjson.dumps(shown).decode("utf-8"))


@click.command()
@store_options
@click.option("--prefix", help="Only keys starting with this.")
@click.option("--start", help="First key (inclusive).")
@click.option("--end", help="Key to stop before (exclusive).")
@click.option("--limit", type=click.IntRange(min=0), help="At most this many records.")
@click.option("--reverse", is_flag=True, help="Descending key order.")
@click.option(
    "--value",
    help="With an index: only keys of this index value (--prefix/--start/--end then range "
    "over index values instead of keys).",
)
@_AS_OF
def scan(
    target: StoreTarget,
    prefix: str | None,
    start: str | None,
    end: str | None,
    limit: int | None,
    reverse: bool,
    value: str | None,
    as_of: AsOf | None,
) -> None:
    """Print records in key order as NDJSON lines: {"key": ..., "value": ...}. With
    `--index NAME` (its function given too) or with --value: the keys an index finds, by
    index value, then key (--value needs no NAME when one index is given). A value that does
    not decode is left out and named on stderr (one line each, with its partition and
    offset); the scan goes on, and exits with status 1 at the end."""
    index = _queried_index(target, value)
    out = sys.stdout.buffer
    skipped = _Skipped()
    with contextlib.closing(target.open_for_queries()) as store:
        report = skipped.report
        if index is None:
            items = store.items(
                prefix=prefix, start=start, end=end, reverse=reverse, limit=limit,
                on_invalid=report, as_of=as_of,
            )  # fmt: skip
        elif value is not None:
            items = store.find(
                index, value, reverse=reverse, limit=limit, on_invalid=report, as_of=as_of
            )
        else:
            items = store.find(
                index, prefix=prefix, start=start, end=end, reverse=reverse, limit=limit,
                on_invalid=report, as_of=as_of,
            )  # fmt: skip
        try:
            for k, v in items:
                out.write(orjson.dumps({"key": k, "value": v}) + b"\n")
        finally:
            out.flush()
    if skipped.count:
        sys.exit(1)


class _Skipped:
    """scan's report of the values it leaves out: a line each on stderr, and how many."""

    def __init__(self) -> None:
        self.count = 0

    def report(self, exc: InvalidValue) -> None:
        self.count += 1
        sys.stdout.flush()  # the lines before it first, where both go to one terminal
        click.echo(f"skipped: {exc}", err=True)


def _queried_index(target: StoreTarget, value: str | None) -> str | None:
    """The index `scan` queries: a bare --index NAME, which must also be defined (the
    store's indexes are given with their functions), else the only one defined when
    --value is given; None to scan keys."""
    defined = target.config.indexes
    if len(target.selected) > 1:
        raise click.BadParameter("scan queries one index at a time", param_hint="--index")
    if target.selected:
        name = target.selected[0]
        if name not in defined and "index" in target.given:
            raise click.BadParameter(
                f"give index {name!r} its function too (--index {name}=PKG.MODULE:FUNCTION), "
                "as every store command gives the store's indexes",
                param_hint="--index",
            )
        return name
    if value is None:
        return None
    if len(defined) != 1:
        raise click.BadParameter(
            "--value needs the index to query: --index NAME", param_hint="--value"
        )
    return next(iter(defined))


@click.command()
@store_options
def count(target: StoreTarget) -> None:
    """Print the number of live keys."""
    with contextlib.closing(target.open_for_queries()) as store:
        n = store.count()
    click.echo("unknown (not counted yet)" if n is None else n)


@click.command()
@store_options
@click.option("--after", metavar="KEY", help="Start after this key (the last one printed).")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many records.")
@click.option(
    "--value-bytes",
    default=1024,
    show_default=True,
    type=click.IntRange(min=0),
    help="Show this many first bytes of each held value (value_bytes gives its length).",
)
def quarantine(target: StoreTarget, after: str | None, limit: int | None, value_bytes: int) -> None:
    """Print the records a store with --invalid-values quarantine did not apply, one JSON
    object a line (key, partition, offset, timestamp, reason, value, value_bytes,
    value_cut), by key."""
    with contextlib.closing(target.open_for_queries()) as store:
        # A few at a time: a held value may be as large as the topic allows.
        while limit is None or limit > 0:
            wanted = _QUARANTINE_CHUNK if limit is None else min(limit, _QUARANTINE_CHUNK)
            chunk = store.quarantined(after, wanted)
            for record in chunk:
                click.echo(orjson.dumps(record.to_dict(value_bytes)).decode("utf-8"))
            if len(chunk) < wanted:
                return
            after = chunk[-1].key
            limit = None if limit is None else limit - len(chunk)


@click.command()
@store_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
@click.option(
    "--offline",
    is_flag=True,
    help="Read the store's own files only, without a broker (works beside a running store).",
)
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C: state, rate, lag, keys.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.05))
@click.option("--count", type=click.IntRange(min=1), help="With --watch: stop after N refreshes.")
def status(
    target: StoreTarget,
    as_json: bool,
    offline: bool,
    watch: bool,
    interval: float,
    count: int | None,
) -> None:
    """Print position, lag, key count, layout version and last restore time. If no broker
    answers, say so on stderr and print what the store's own files say (as --offline).
    --watch keeps a live view of the store (redrawn on a terminal, a line per refresh
    otherwise); beside a running application it reads the store's files each time."""
    if watch:
        _watch(target, offline, interval, count)
        return
    if offline:
        report = _inspect(target.config.path)
    else:
        try:
            store = target.open_for_queries()
        except BrokerUnavailable as exc:
            click.echo(f"{exc}; showing the store's own files instead", err=True)
            report = _inspect(target.config.path)
        else:
            with contextlib.closing(store):
                report = store.status()
    if as_json:
        click.echo(orjson.dumps(dataclasses.asdict(report), option=orjson.OPT_NON_STR_KEYS))
    else:
        click.echo(_describe(report))


def _watch(target: StoreTarget, offline: bool, interval: float, count: int | None) -> None:
    watcher = Watcher(sys.stdout, tty=sys.stdout.isatty())
    with contextlib.ExitStack() as stack:
        store = None if offline else stack.enter_context(target.open_for_queries())
        if isinstance(store, GlobalStore):
            report = store.status
        else:  # a directory another process holds: its files, read afresh each time
            if store is not None:
                store.close()
            report = functools.partial(_inspect, target.config.path)
        with contextlib.suppress(KeyboardInterrupt):
            watch(report, watcher, interval, count)


def _describe(s: StoreStatus) -> str:
    restored = (
        "never"
        if s.last_restore_at is None
        else datetime.datetime.fromtimestamp(s.last_restore_at).isoformat(timespec="seconds")
    )
    rows = [
        ("topic", s.topic),
        ("path", s.path),
        ("state", s.state),
        *([("stale", s.stale)] if s.stale else []),
        *([("progress", _progress(s.progress))] if s.progress else []),
        ("position", _offsets(s.position)),
        ("lag", "unknown" if s.state is State.OFFLINE else _lag(s.lag)),
        ("keys", "unknown" if s.key_count is None else f"{s.key_count:,}"),
        *([("quarantined", f"{s.quarantined:,} keys")] if s.quarantined else []),
        ("undecodable", "not counted" if s.undecodable is None else f"{s.undecodable:,} values"),
        ("layout version", str(s.layout_version)),
        ("migration", _migration(s)),
        ("last restore", restored),
        ("indexes", _indexes(s)),
        ("ttl", _ttl(s)),
    ]
    return "\n".join(f"{name + ':':<16}{value}" for name, value in rows)


def _progress(p: Progress) -> str:
    eta = "?" if p.eta_seconds is None else str(datetime.timedelta(seconds=round(p.eta_seconds)))
    return f"{p.phase}: {p.done:,}/{p.total:,}, {p.left:,} left, {p.rate:,.0f}/s, ETA {eta}"


def _migration(s: StoreStatus) -> str:
    failed = f", {s.conversion_failures:,} kept unconverted" if s.conversion_failures else ""
    done = f"{s.migrated_values:,} values converted{failed}"
    return f"{s.migration} ({done})" if s.migration else f"none ({done})"


def _indexes(s: StoreStatus) -> str:
    shown = []
    for name, index in s.indexes.items():
        state = "ready" if index.ready else f"building ({index.indexed_keys:,} keys indexed)"
        failed = f", {index.failures:,} failures" if index.failures else ""
        shown.append(f"{name} v{index.version} {state}, {index.entries:,} entries{failed}")
    return "; ".join(shown) or "none"


def _ttl(s: StoreStatus) -> str:
    t = s.ttl
    if t is None:
        return "none"
    index = "ready" if t.time_index_ready else "building"
    return (
        f"{t.seconds:g} s, time index {index} ({t.time_index_entries:,} keys), {t.purged:,} purged"
    )


def _lag(lag: Mapping[int, int]) -> str:
    return f"{sum(lag.values()):,} records {_offsets(lag)}"


def _offsets(per_partition: Mapping[int, int]) -> str:
    return " ".join(f"{p}:{o}" for p, o in sorted(per_partition.items())) or "-"


def register(group: click.Group) -> None:
    """Add the store commands to the `globalstore` group."""
    for command in (restore, get, scan, count, quarantine, status):
        group.add_command(command)
