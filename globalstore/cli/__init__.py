"""The `globalstore` command: a thin click group over the library's public API."""

from __future__ import annotations

import logging

import click

from globalstore.cli.demo import demo
from globalstore.cli.kafka import kafka
from globalstore.cli.pipeline import pipeline
from globalstore.cli.store import register


@click.group()
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """globalstore: a local, queryable copy of a compacted Kafka topic in every instance."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


main.add_command(demo)
main.add_command(kafka)
main.add_command(pipeline)
register(main)
