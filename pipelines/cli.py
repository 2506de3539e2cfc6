"""`globalstore pipeline run NAME` and `globalstore pipeline package`.

The `globalstore` command adds this group lazily, and the same `run` command is the
spark-submit entry (pipelines/__main__.py, or the script `package` writes), so every flag
and default is defined once, here. Spark is imported only when a pipeline actually runs.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from globalstore.config import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP
from globalstore.converters import import_converter
from globalstore.errors import ConfigurationError, GlobalStoreError
from globalstore.kafka.clients import LIBRDKAFKA_LOG
from globalstore.kafka.settings import kafka_config_options
from pipelines.defaults import LOCAL_MASTER, ORDERS_RAW_TOPIC, TRIGGER_INTERVAL
from pipelines.java_clients import java_settings
from pipelines.topics import require_topic

FC = TypeVar("FC", bound=Callable[..., Any])  # a click command's function

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.orders.generator import RawRecord


class _Failed(click.ClickException):
    """A failure the user can fix, as the `globalstore` command prints one: `error: ...` in
    one line, exit status 2 (globalstore/cli/errors.py, which pipelines/ may not import)."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        click.echo(f"error: {self.message}", err=True)


class _OneLineErrors(click.Command):
    """`run` as the spark-submit entry has no `globalstore` group above it to explain
    errors: then a failure the user can fix is one line here, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GlobalStoreError as exc:
            if ctx.parent is not None:
                raise  # the `globalstore` group explains it, or shows everything with -v
            raise _Failed(" ".join(str(exc).split())) from exc


def _java_side(kafka_config: Mapping[str, str]) -> None:
    """Refuse, before anything connects, a setting Spark's Java clients cannot be given."""
    try:
        java_settings(kafka_config)
    except ConfigurationError as exc:
        hint = "--kafka-config/--kafka-config-file"
        raise click.BadParameter(str(exc), param_hint=hint) from None


def _librdkafka_logs(verbose: bool) -> None:
    # librdkafka's own lines (a refused password, retries) are for -v: a failure reaches the
    # user as one error line. The `globalstore` group does the same; spark-submit has none.
    if not verbose:
        LIBRDKAFKA_LOG.setLevel(logging.CRITICAL)


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


_master_option = click.option(
    "--master", default=LOCAL_MASTER, show_default=True, help="Ignored under spark-submit."
)

_registry_option = click.option(
    "--schema-registry",
    metavar="URL",
    help="Avro input: the reader schemas are every version of subject <raw topic>-value in "
    "this Confluent-API schema registry.",
)


def _avro_schema_option(help_text: str) -> Callable[[FC], FC]:
    return click.option(
        "--avro-schema",
        type=click.Path(dir_okay=False, path_type=Path),
        help=help_text,
    )


@pipeline.command("run", cls=_OneLineErrors)
@click.argument("name")
@_bootstrap_option
@kafka_config_options
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
    "--trigger-interval", default=TRIGGER_INTERVAL, show_default=True, help="Stream mode."
)
@click.option("--starting-offsets", default="earliest", show_default=True, help="First run only.")
@click.option(
    "--max-offsets-per-trigger",
    type=click.IntRange(min=1),
    help="Cap on raw records per micro-batch  [default: no cap]",
)
@click.option(
    "--reset",
    is_flag=True,
    help="Start over: move the checkpoint aside (to CHECKPOINT.reset-<UTC time>, kept) and "
    "read the raw topic from --starting-offsets.",
)
@_registry_option
@_avro_schema_option("Avro input: the reader schema, a .avsc file (without a registry).")
@click.option(
    "--avro-schema-id",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="The schema id the records read with --avro-schema carry.",
)
@_master_option
def run(
    name: str,
    bootstrap_servers: str,
    kafka_config: dict[str, str],
    source_topic: str | None,
    target_topic: str | None,
    dead_letter_topic: str | None,
    checkpoint_dir: str | None,
    mode: str,
    trigger_interval: str,
    starting_offsets: str,
    max_offsets_per_trigger: int | None,
    reset: bool,
    schema_registry: str | None,
    avro_schema: Path | None,
    avro_schema_id: int,
    master: str,
) -> None:
    """Run pipeline NAME (batch: what is new since the last run; stream: until Ctrl-C)."""
    from pipelines import skeleton  # noqa: PLC0415 - pulls in pyspark
    from pipelines.registry import get_pipeline  # noqa: PLC0415
    from pipelines.session import build_session, under_spark_submit  # noqa: PLC0415

    verbose = bool(click.get_current_context().find_root().params.get("verbose"))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("pipelines").setLevel(logging.INFO)  # progress: one line per batch
    _librdkafka_logs(verbose)
    jvm_log = None if verbose else Path(".globalstore", "logs", "spark.log")
    if jvm_log is not None:
        # pyspark's own warnings (e.g. about the pandas version) belong with Spark's output.
        warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    try:
        spec = get_pipeline(name)
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="NAME") from None
    source = source_topic or spec.source_topic
    # Before Spark starts: a setting Java cannot take, a registry that does not answer,
    # refused credentials or a missing raw topic is one line, not a Java stack trace.
    _java_side(kafka_config)
    avro_schemas = _reader_schemas(schema_registry, avro_schema, avro_schema_id, source)
    require_topic(bootstrap_servers, source, kafka_config, f"pipeline generate {name}")
    if jvm_log is not None and not under_spark_submit():
        click.echo(f"Spark's own output goes to {jvm_log} (-v shows it here)", err=True)
    spark = build_session(master=master, jvm_log=jvm_log, avro=avro_schemas is not None)
    target = target_topic or spec.target_topic
    if checkpoint_dir is None:
        if not (spark.sparkContext.master or "").startswith("local"):
            raise click.UsageError(
                "--checkpoint-dir is required on a cluster: a URI every node can reach "
                "(hdfs://, s3a://, a shared mount), since executors write the state there"
            )
        checkpoint_dir = str(Path(".globalstore", "checkpoints", target).resolve())
    if reset:
        _move_aside(spark, checkpoint_dir)
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
        kafka_config=kafka_config,
        avro_schemas=avro_schemas,
        avro_lookup=_schema_lookup(schema_registry, source),
    )
    summary = skeleton.run(spark, spec, options)
    click.echo(f"{name}: {summary.describe()}")


def _move_aside(spark: SparkSession, checkpoint_dir: str) -> None:
    from pipelines.checkpoint import move_aside  # noqa: PLC0415 - pulls in pyspark

    moved = move_aside(spark, checkpoint_dir)
    said = f"no checkpoint at {checkpoint_dir}" if moved is None else f"moved to {moved}"
    click.echo(f"--reset: {said}; reading the raw topic afresh", err=True)


def _reader_schemas(
    registry: str | None, avsc: Path | None, avsc_id: int, source: str
) -> dict[int, str] | None:
    """{schema id: schema} of an Avro run, looked up once, before Spark starts; None: JSON."""
    from pipelines.schema_registry import subject_of, subject_schemas  # noqa: PLC0415

    if registry is not None and avsc is not None:
        raise click.UsageError("--schema-registry and --avro-schema exclude each other")
    if registry is not None:
        return subject_schemas(registry, subject_of(source))
    if avsc is not None:
        return {avsc_id: _read_avsc(avsc)}
    return None


def _schema_lookup(registry: str | None, source: str) -> Callable[[], dict[int, str]] | None:
    """How a run over a registry looks its reader schemas up again (a new schema id)."""
    from pipelines.schema_registry import subject_of, subject_schemas  # noqa: PLC0415

    if registry is None:
        return None
    return lambda: subject_schemas(registry, subject_of(source))


def _read_avsc(path: Path, hint: str = "--avro-schema") -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint=hint) from None


@pipeline.command("register-schema", cls=_OneLineErrors)
@click.option("--schema-registry", metavar="URL", required=True, help="Confluent-API registry.")
@click.option("--topic", required=True, help="The raw topic: the subject is <topic>-value.")
@click.argument("schema_file", type=click.Path(dir_okay=False, path_type=Path))
def register_schema(schema_registry: str, topic: str, schema_file: Path) -> None:
    """Register a new version of the raw topic's Avro schema (a .avsc file). The registry
    checks it against the subject's compatibility rule and may refuse it (409); running
    pipelines pick an accepted one up when its first record arrives."""
    from pipelines.schema_registry import register, subject_of  # noqa: PLC0415

    subject = subject_of(topic)
    schema_id = register(schema_registry, subject, _read_avsc(schema_file, "SCHEMA_FILE"))
    click.echo(f"{subject}: schema id {schema_id}")


@pipeline.command("rewrite")
@_bootstrap_option
@kafka_config_options
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
@_master_option
def rewrite(
    bootstrap_servers: str,
    source_topic: str,
    target_topic: str,
    converter: str,
    value_format: int,
    kafka_config: dict[str, str],
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
    _java_side(kafka_config)
    require_topic(bootstrap_servers, source_topic, kafka_config, "pipeline run NAME")
    spark = build_session(master=master, jvm_log=Path(".globalstore", "logs", "spark.log"))
    written = job.rewrite(
        spark, bootstrap_servers, source_topic, target_topic, convert, value_format, kafka_config
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
@kafka_config_options
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
@click.option(
    "--format",
    "value_format",
    type=click.Choice(["json", "avro"]),
    default="json",
    show_default=True,
    help="avro: the Confluent wire format, with --schema-registry or --avro-schema.",
)
@_registry_option
@_avro_schema_option("Avro without a registry: write the schema here (its id is 1).")
def generate(
    name: str,
    bootstrap_servers: str,
    kafka_config: dict[str, str],
    orders: int,
    bad: float,
    seed: int,
    topic: str | None,
    partitions: int,
    value_format: str,
    schema_registry: str | None,
    avro_schema: Path | None,
) -> None:
    """Put sample raw events on the raw topic: couriers' order events, out of order, some
    sent twice, a few broken. Creates the topic when it is missing."""
    from pipelines.orders.generator import StreamShape, produce  # noqa: PLC0415
    from pipelines.orders.generator import generate as events  # noqa: PLC0415
    from pipelines.topics import ensure_topic  # noqa: PLC0415

    target = topic or ORDERS_RAW_TOPIC
    if value_format == "avro" and (schema_registry is None) == (avro_schema is None):
        raise click.UsageError("--format avro takes one of --schema-registry, --avro-schema")
    ensure_topic(bootstrap_servers, target, partitions, kafka_config)
    shape = StreamShape(orders=orders, bad_every=round(1 / bad) if bad else 0)
    records = events(shape, seed=seed)
    if value_format == "avro":
        records = _as_avro(records, schema_registry, avro_schema, target)
    sent = produce(bootstrap_servers, target, records, kafka_config)
    broken = sum(record.bad_reason is not None for record in records)
    click.echo(f"{name}: {sent:,} raw events for {orders:,} orders ({broken:,} broken) -> {target}")


def _as_avro(
    records: list[RawRecord], registry: str | None, avsc: Path | None, topic: str
) -> list[RawRecord]:
    """The events in Avro: the schema registered (its id in the records), or written to
    `avsc` with id 1, the id `pipeline run --avro-schema` expects by default."""
    from pipelines.orders.avro_events import SCHEMA_TEXT, as_avro  # noqa: PLC0415
    from pipelines.schema_registry import register, subject_of  # noqa: PLC0415

    if registry is not None:
        schema_id = register(registry, subject_of(topic), SCHEMA_TEXT)
    else:
        assert avsc is not None
        avsc.write_text(SCHEMA_TEXT + "\n")
        schema_id = 1
    click.echo(f"Avro schema id {schema_id}", err=True)
    return as_avro(records, schema_id)
