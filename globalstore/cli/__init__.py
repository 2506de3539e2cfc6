"""The `globalstore` command: a thin click group over the library's public API."""

from __future__ import annotations

import importlib
import logging

import click

from globalstore.cli.demo import demo
from globalstore.cli.errors import EXPLAINED, explain
from globalstore.cli.follow import follow
from globalstore.cli.kafka import kafka
from globalstore.cli.migrate import migrate
from globalstore.cli.serve import serve
from globalstore.cli.snapshot import snapshot
from globalstore.cli.store import register
from globalstore.kafka.clients import LIBRDKAFKA_LOG

__all__ = ["main"]

# Groups that live outside the library package, loaded only when named: the pipeline command
# belongs to pipelines/ (it is also the spark-submit entry), and importing it costs nothing
# to a user who only queries a store.
_LAZY_GROUPS = {"pipeline": ("pipelines.cli", "pipeline")}


class _Main(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_LAZY_GROUPS])

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except EXPLAINED as exc:
            if ctx.params.get("verbose"):
                raise  # -v: the whole traceback, for a bug report
            raise explain(exc) from exc

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY_GROUPS:
            module, name = _LAZY_GROUPS[cmd_name]
            command: click.Command = getattr(importlib.import_module(module), name)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Main)
@click.version_option(package_name="globalstore", prog_name="globalstore")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More log output (-v info, -vv debug), and tracebacks with errors.",
)
def main(verbose: int) -> None:
    """globalstore: a local, queryable copy of a compacted Kafka topic in every instance."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:  # the Kafka client's retries are for -v; failures reach the user as errors
        LIBRDKAFKA_LOG.setLevel(logging.CRITICAL)


main.add_command(demo)
main.add_command(follow)
main.add_command(kafka)
main.add_command(migrate)
main.add_command(serve)
main.add_command(snapshot)
register(main)
