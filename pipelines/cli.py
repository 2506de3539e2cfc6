"""`globalstore pipeline run NAME`: run a Spark pipeline with a local[*] session.

The `globalstore` command adds this group lazily, and the same command is the spark-submit
entry (pipelines/__main__.py), so every flag and default is defined once, here. Spark is
imported only when a pipeline actually runs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from globalstore.config import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP


@click.group()
def pipeline() -> None:
    """Spark jobs that write the compacted transformed topics."""


@pipeline.command("run")
@click.argument("name")
@click.option(
    "--bootstrap-servers",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    envvar=BOOTSTRAP_ENV,
    show_envvar=True,
)
@click.option("--source-topic", help="Raw events topic  [default: the pipeline's, e.g. orders.raw]")
@click.option("--target-topic", help="Compacted output topic  [default: e.g. orders.current]")
@click.option("--dead-letter-topic", help="Rejected records  [default: e.g. orders.deadletter]")
@click.option(
    "--checkpoint-dir",
    type=click.Path(path_type=Path),
    help="Spark checkpoint (offsets + state)  [default: .globalstore/checkpoints/TARGET]",
)
@click.option("--mode", type=click.Choice(["batch", "stream"]), default="batch", show_default=True)
@click.option("--trigger-interval", default="1 second", show_default=True, help="Stream mode.")
@click.option("--starting-offsets", default="earliest", show_default=True, help="First run only.")
@click.option("--master", default="local[*]", show_default=True, help="Ignored under spark-submit.")
def run(
    name: str,
    bootstrap_servers: str,
    source_topic: str | None,
    target_topic: str | None,
    dead_letter_topic: str | None,
    checkpoint_dir: Path | None,
    mode: str,
    trigger_interval: str,
    starting_offsets: str,
    master: str,
) -> None:
    """Run pipeline NAME (batch: what is new since the last run; stream: until Ctrl-C)."""
    from pipelines import skeleton  # noqa: PLC0415 - pulls in pyspark
    from pipelines.registry import get_pipeline  # noqa: PLC0415
    from pipelines.session import build_session  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        spec = get_pipeline(name)
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="NAME") from None
    target = target_topic or spec.target_topic
    options = skeleton.RunOptions(
        bootstrap_servers=bootstrap_servers,
        source_topic=source_topic or spec.source_topic,
        target_topic=target,
        dead_letter_topic=dead_letter_topic or spec.dead_letter_topic,
        checkpoint_dir=checkpoint_dir or Path(".globalstore", "checkpoints", target),
        mode="stream" if mode == "stream" else "batch",
        trigger_interval=trigger_interval,
        starting_offsets=starting_offsets,
    )
    summary = skeleton.run(build_session(master=master), spec, options)
    click.echo(f"{name}: {summary.describe()}")
