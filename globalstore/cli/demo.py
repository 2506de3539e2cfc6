"""`globalstore demo`: the README's end-to-end run (see globalstore.demo.run)."""

from __future__ import annotations

import signal
import sys
from types import FrameType

import click

__all__ = ["demo"]


@click.command()
@click.option("--orders", default=3000, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=7, show_default=True, help="Seed of the generated stream.")
@click.option("--partitions", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--port", type=int, help="Port of the demo's own broker  [default: a free one]")
@click.option("--keep-dir", is_flag=True, help="Keep the broker data, stores and checkpoint.")
def demo(orders: int, seed: int, partitions: int, port: int | None, keep_dir: bool) -> None:
    """Run it all locally: Kafka, the orders pipeline on Spark, two stores; check they agree.

    Exits non-zero when the two store instances disagree or miss the expected orders.
    """
    from globalstore.demo.report import render_summary  # noqa: PLC0415
    from globalstore.demo.run import DemoOptions, run_demo  # noqa: PLC0415 - pulls in Spark

    # SIGTERM (from a CI runner or `kill`) unwinds like Ctrl-C, so the demo's broker, which
    # runs in a session of its own, is stopped by the same cleanup.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    result = run_demo(DemoOptions(orders, seed, partitions, port, keep_dir))
    click.echo(render_summary(result))
    if result.problems():
        raise SystemExit(1)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)
