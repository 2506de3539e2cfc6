"""`globalstore follow`: restore a store and keep it current until stopped, as the one process
that writes it: a sidecar beside service workers that read it with SharedStore."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from types import FrameType

import click

from globalstore.cli.progress import ProgressBar
from globalstore.cli.target import StoreTarget, store_options
from globalstore.cli.watch import Watcher

__all__ = ["follow"]


@click.command()
@store_options
@click.option(
    "--interval",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds between two status lines on stderr.",
)
def follow(target: StoreTarget, interval: float) -> None:
    """Restore the store at --path, then follow --topic until SIGTERM or Ctrl-C.

    Processes on the same host read it with SharedStore(path): one copy on disk, a few
    milliseconds behind this writer.
    """
    err = sys.stderr
    store = target.open(ProgressBar(err, tty=err.isatty()))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    click.echo(f"following {target.config.topic} into {target.config.path}", err=True)
    watcher = Watcher(err, tty=False)  # one line per report, also on a terminal
    with contextlib.closing(store):
        while not stop.wait(interval):
            watcher.show(store.status())
    click.echo("stopped", err=True)
