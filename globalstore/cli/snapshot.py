"""`globalstore snapshot create DIR`: a snapshot of a store directory that is not running."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import click

from globalstore.cli.errors import UserError
from globalstore.snapshots import archive
from globalstore.storage import DirLock

__all__ = ["create", "install_snapshot", "snapshot"]


@click.group()
def snapshot() -> None:
    """Snapshots a new instance can start from (--bootstrap-from, restore --from-snapshot)."""


@snapshot.command()
@click.option(
    "--path",
    required=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="The store directory (not in use: for a running store use its GET /v1/snapshot).",
)
@click.argument("dest", type=click.Path(path_type=Path))
def create(path: Path, dest: Path) -> None:
    """Write a consistent checkpoint of the store at --path into DEST/db."""
    try:
        written = archive.create(path, dest)
    except OSError as exc:
        raise UserError(f"cannot write the snapshot into {dest}: {exc}") from exc
    click.echo(f"snapshot written to {written.parent}")


def install_snapshot(source: str, path: Path, out: TextIO) -> bool:
    """snapshot.install with the bytes received shown on `out` (redrawn on a terminal, a line
    every few seconds otherwise) and the outcome said in one line. It holds the store's lock
    meanwhile: StoreLocked if another process runs the store."""
    tty = out.isatty()
    lock = DirLock(path)
    try:
        installed = archive.install(source, path, progress=_received(out, tty))
    finally:
        lock.release()
    if tty:
        out.write("\r\x1b[K")
    if installed:
        out.write(f"installed snapshot {source}; catching up from its offsets\n")
    elif archive.is_empty(path):
        out.write(f"snapshot {source} not used (see the warning); restoring from Kafka\n")
    else:
        out.write(f"{path} already holds a store: snapshot {source} not used\n")
    out.flush()
    return installed


def _received(out: TextIO, tty: bool) -> Callable[[int], None]:
    began = shown = time.monotonic()

    def show(received: int) -> None:
        nonlocal shown
        now = time.monotonic()
        if now - shown < (0.1 if tty else 5.0):
            return
        shown = now
        rate = received / (now - began) / 1e6
        line = f"fetching snapshot: {received / 1e6:,.0f} MB ({rate:,.0f} MB/s)"
        out.write(f"\r{line}" if tty else f"{line}\n")
        out.flush()

    return show
