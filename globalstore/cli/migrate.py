"""`globalstore migrate status|run|switch`: see and drive a store's migrations from the shell.

status  what a store directory holds: layout, migration under way, value format (offline)
run     restore the store, then convert its values to the current layout and value format,
        with a progress bar, and exit when nothing is left
switch  restore a new store (the topic rewritten in a new format, X.v2) to its end, then
        remove the old store's directory if asked: what SwitchingStore does in a running
        application, for a deployment that restarts onto the new store
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from globalstore.cli.progress import ProgressBar
from globalstore.cli.target import StoreTarget, store_options
from globalstore.errors import StoreFailed
from globalstore.status import State
from globalstore.storage import Storage
from globalstore.stores.switching_store import remove_store

__all__ = ["migrate", "run", "status", "switch"]

_POLL = 0.1


@click.group()
def migrate() -> None:
    """See and drive a store's layout, value format and topic migrations."""


@migrate.command()
@click.option(
    "--path",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Store directory.",
)
def status(path: Path) -> None:
    """Print a store's layout, the migration under way and its value format, from its files
    (also while an application runs it)."""
    storage = Storage(path, read_only=True)
    try:
        meta = storage.read_meta()
    finally:
        storage.close()
    converting = "under way" if meta.converting else "none"
    rows = [
        ("topic", meta.topic or "-"),
        ("layout", "-" if meta.layout is None else str(meta.layout)),
        ("migrating from", "-" if meta.migrate_from is None else f"layout {meta.migrate_from}"),
        ("value format", "as written" if meta.value_format is None else str(meta.value_format)),
        ("conversion", converting),
        ("keys", "unknown" if meta.count is None else f"{meta.count:,}"),
    ]
    click.echo("\n".join(f"{name + ':':<16}{value}" for name, value in rows))


@migrate.command()
@store_options
def run(target: StoreTarget) -> None:
    """Restore the store at --path, convert every value to the current layout and value
    format (--converter), then exit."""
    progress = ProgressBar(sys.stderr, sys.stderr.isatty(), "converting", "values")
    with target.open(ProgressBar(sys.stderr, sys.stderr.isatty())) as store:
        progress.begin(store.count())
        while (s := store.status()).migration is not None:
            if s.state in (State.FAILED, State.CLOSED):
                raise StoreFailed(f"the store stopped while converting: {s.last_error}")
            progress.show(s.migrated_values, time.monotonic())
            time.sleep(_POLL)
        s = store.status()
        if progress.tty:
            progress.show(progress.total, time.monotonic())
            progress.out.write("\n")
        kept = f"; {s.conversion_failures:,} kept as they were (see the log)"
        progress.write(
            f"converted {s.migrated_values:,} values{kept if s.conversion_failures else ''}"
        )


@migrate.command()
@store_options
@click.option(
    "--from-path",
    "old_path",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The old store's directory (the topic before the migration).",
)
@click.option("--remove-old", is_flag=True, help="Remove --from-path once --path is ready.")
def switch(target: StoreTarget, old_path: Path, remove_old: bool) -> None:
    """Restore the new store at --path (from --topic, the rewritten topic) to its end, then
    remove the old one at --from-path if asked. Stop applications on the old store first, or
    switch them in process with SwitchingStore."""
    if remove_old:
        Storage(old_path, read_only=True).close()  # no store there: say so before restoring
    with target.open(ProgressBar(sys.stderr, sys.stderr.isatty())) as store:
        click.echo(f"ready: {store.count():,} keys at {target.config.path}")
    if remove_old:
        remove_store(old_path)
        click.echo(f"removed {old_path}")
