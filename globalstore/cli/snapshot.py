"""`globalstore snapshot create DIR`: a snapshot of a store directory that is not running."""

from __future__ import annotations

from pathlib import Path

import click

from globalstore import snapshot as snapshots
from globalstore.errors import GlobalStoreError


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
        written = snapshots.create(path, dest)
    except (GlobalStoreError, OSError) as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    click.echo(f"snapshot written to {written.parent}")
