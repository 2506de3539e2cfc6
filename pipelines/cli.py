"""`globalstore pipeline run NAME` and `globalstore pipeline package`.

The `globalstore` command adds this group lazily, and the same `run` command is the
spark-submit entry (pipelines/__main__.py, or the script `package` writes), so every flag
and default is defined once, here. Spark is imported only when a pipeline actually runs.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import click

from globalstore.config import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP
from globalstore.converters import import_converter
from pipelines.topics import require_topic


class KeyValue(click.ParamType):
    """One KEY=VALUE option value, as a (key, value) pair."""

    name = "KEY=VALUE"

    def convert(
        self, value: str, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            self.fail(f"expected KEY=VALUE, got {value!r}", param, ctx)
        return key.strip(), setting.strip()


@click.group()
def pipeline() -> None:
    """Spark jobs that write the compacted transformed topics."""


_bootstrap_option = click.option(
    "--bootstrap-servers",
    default=DEFAULT_BOOTSTRAP,
    show_default=True,
    envvar=BOOTSTRAP_ENV,
    show_envvar=True,
)


@pipeline.command("run")
@click.argument("name")
@_bootstrap_option
@click.option(
    "--kafka-option",
    "kafka_options",
    type=KeyValue(),
    multiple=True,
    help="Kafka client setting for source, sink and admin client, e.g. "
    "security.protocol=SSL (repeatable).",
)
@click.option("--source-topic", help="Raw events topic  [default: the pipeline's, e.g. orders.raw]")
@click.option("--target-topic", help="Compacted output topic  [default: e.g. orders.current]")
@click.option("--dead-letter-topic", help="Rejected records  [default: e.g. orders.deadletter]")
@click.option(
    "--checkpoint-dir",
    help="Spark checkpoint (offsets + state): a path or any URI Spark can write "
    "(hdfs://, s3a://). Required on a cluster.  [default, local master only: "
    ".globalstore/checkpoints/TARGET]",
)
@click.option("--mode", type=click.Choice(["batch", "stream"]), default="batch", show_default=True)
@click.option(
    "--trigger-interval", default="250 milliseconds", show_default=True, help="Stream mode."
)
@click.option("--starting-offsets", default="earliest", show_default=True, help="First run only.")
@click.option(
    "--max-offsets-per-trigger",
    type=click.IntRange(min=1),
    help="Cap on raw records per micro-batch  [default: no cap]",
)
@click.option("--master", default="local[*]", show_default=True, help="Ignored under spark-submit.")
def run(
    name: str,
    bootstrap_servers: str,
    kafka_options: tuple[tuple[str, str], ...],
    source_topic: str | None,
    target_topic: str | None,
    dead_letter_topic: str | None,
    checkpoint_dir: str | None,
    mode: str,
    trigger_interval: str,
    starting_offsets: str,
    max_offsets_per_trigger: int | None,
    master: str,
) -> None:
    """Run pipeline NAME (batch: what is new since the last run; stream: until Ctrl-C)."""
    from pipelines import skeleton  # noqa: PLC0415 - pulls in pyspark
    from pipelines.registry import get_pipeline  # noqa: PLC0415
    from pipelines.session import build_session, under_spark_submit  # noqa: PLC0415

    verbose = bool(click.get_current_context().find_root().params.get("verbose"))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("pipelines").setLevel(logging.INFO)  # progress: one line per batch
    jvm_log = None if verbose else Path(".globalstore", "logs", "spark.log")
    if jvm_log is not None:
        # pyspark's own warnings (e.g. about the pandas version) belong with Spark's output.
        warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    try:
        spec = get_pipeline(name)
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="NAME") from None
    source = source_topic or spec.source_topic
    # Before Spark starts: a missing raw topic is one line, not a Java stack trace.
    require_topic(bootstrap_servers, source, dict(kafka_options), f"pipeline generate {name}")
    if jvm_log is not None and not under_spark_submit():
        click.echo(f"Spark's own output goes to {jvm_log} (-v shows it here)", err=True)
    spark = build_session(master=master, jvm_log=jvm_log)
    target = target_topic or spec.target_topic
    if checkpoint_dir is None:
        if not spark.sparkContext.master.startswith("local"):
            raise click.UsageError(
                "--checkpoint-dir is required on a cluster: a URI every node can reach "
                "(hdfs://, s3a://, a shared mount), since executors write the state there"
            )
        checkpoint_dir = str(Path(".globalstore", "checkpoints", target).resolve())
    options = skeleton.RunOptions(
        bootstrap_servers=bootstrap_servers,
        source_topic=source,
        target_topic=target,
        dead_letter_topic=dead_letter_topic or spec.dead_letter_topic,
        checkpoint_dir=checkpoint_dir,
        mode="stream" if mode == "stream" else "batch",
        trigger_interval=trigger_interval,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger,
        kafka_options=dict(kafka_options),
    )
    summary = skeleton.run(spark, spec, options)
    click.echo(f"{name}: {summary.describe()}")


@pipeline.command("rewrite")
@_bootstrap_option
@click.option("--source-topic", required=True, help="The compacted topic to rewrite, e.g. X.v1.")
@click.option("--target-topic", required=True, help="The new compacted topic, e.g. X.v2.")
@click.option(
    "--converter",
    required=True,
    metavar="PKG.MODULE:FUNCTION",
    help="Turns one decoded value into the new format.",
)
@click.option(
    "--value-format",
    required=True,
    type=click.IntRange(1, 255),
    help="The format the converted records declare.",
)
@click.option("--kafka-option", "kafka_options", type=KeyValue(), multiple=True, help="As for run.")
@click.option("--master", default="local[*]", show_default=True, help="Ignored under spark-submit.")
def rewrite(
    bootstrap_servers: str,
    source_topic: str,
    target_topic: str,
    converter: str,
    value_format: int,
    kafka_options: tuple[tuple[str, str], ...],
    master: str,
) -> None:
    """Rewrite a compacted topic into a new one through a converter (a topic-to-topic
    migration): latest record per key, converted, with the new format header."""
    from pipelines import rewrite as job  # noqa: PLC0415 - pulls in pyspark
    from pipelines.session import build_session  # noqa: PLC0415

    try:
        convert = import_converter(converter)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--converter") from None
    require_topic(bootstrap_servers, source_topic, dict(kafka_options), "pipeline run NAME")
    spark = build_session(master=master, jvm_log=Path(".globalstore", "logs", "spark.log"))
    written = job.rewrite(
        spark,
        bootstrap_servers,
        source_topic,
        target_topic,
        convert,
        value_format,
        dict(kafka_options),
    )
    click.echo(
        f"rewrote {written:,} keys of {source_topic} into {target_topic} (format {value_format})"
    )


@pipeline.command("package")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dist"),
    show_default=True,
)
def package(output_dir: Path) -> None:
    """Write the job's code as a zip for spark-submit --py-files, and its entry script."""
    from pipelines.package import build_package  # noqa: PLC0415

    archive, entry = build_package(output_dir)
    click.echo(f"{archive}\n{entry}")


def _share(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """A share written as "1%" or "0.01"."""
    text = value.strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise click.BadParameter(f"expected a share like 1% or 0.01, got {value!r}") from None
    if not 0 <= share < 1:
        raise click.BadParameter(f"expected a share from 0% to below 100%, got {value!r}")
    return share


@pipeline.command("generate")
# Both pipelines read the raw order events (pipelines/registry.py).
@click.argument("name", type=click.Choice(["orders", "couriers"]))
@_bootstrap_option
@click.option("--orders", default=3000, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--bad",
    default="1%",
    show_default=True,
    callback=_share,
    help="Share of records broken on purpose (each for a named dead-letter reason).",
)
@click.option("--seed", default=7, show_default=True, help="Seed of the generated stream.")
@click.option("--topic", help="Raw events topic  [default: the pipeline's, e.g. orders.raw]")
@click.option(
    "--partitions", default=3, show_default=True, type=click.IntRange(min=1), help="If created."
)
def generate(
    name: str,
    bootstrap_servers: str,
    orders: int,
    bad: float,
    seed: int,
    topic: str | None,
    partitions: int,
) -> None:
    """Put sample raw events on the raw topic: couriers' order events, out of order, some
    sent twice, a few broken. Creates the topic when it is missing."""
    from pipelines.orders.generator import StreamShape, produce  # noqa: PLC0415
    from pipelines.orders.generator import generate as events  # noqa: PLC0415
    from pipelines.topics import ensure_topic  # noqa: PLC0415

    target = topic or "orders.raw"
    ensure_topic(bootstrap_servers, target, partitions)
    shape = StreamShape(orders=orders, bad_every=round(1 / bad) if bad else 0)
    records = events(shape, seed=seed)
    sent = produce(bootstrap_servers, target, records)
    broken = sum(record.bad_reason is not None for record in records)
    click.echo(f"{name}: {sent:,} raw events for {orders:,} orders ({broken:,} broken) -> {target}")
