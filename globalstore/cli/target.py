"""The options every store command shares (topic, broker, path, value formats, transform,
indexes, ttl, max staleness, Kafka client settings), and the StoreTarget they build: the
StoreConfig, how long to wait, and the store it opens.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from globalstore.cli.discards import recorded, refuse_discarding
from globalstore.cli.formats import chain, import_converter, index_options
from globalstore.config import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, OnInvalidValue, StoreConfig
from globalstore.errors import StoreLocked
from globalstore.kafka.settings import kafka_config_options
from globalstore.listeners import StoreListener
from globalstore.read.protocols import StoreReader
from globalstore.stores.global_store import GlobalStore
from globalstore.stores.read_only_store import ReadOnlyStore

__all__ = ["StoreTarget", "store_options"]


@dataclasses.dataclass(frozen=True)
class StoreTarget:
    """What every store command is given: the store's settings and how long to wait."""

    config: StoreConfig
    timeout: float
    # Bare `--index NAME`s: the index `scan` queries (other commands take none).
    selected: tuple[str, ...] = ()
    # Let the options drop the store's indexes or time index, or rebuild it (discards.py).
    redefine: bool = False
    # Of discards.RECORDED: the options given (the others a reading command takes from
    # the store).
    given: frozenset[str] = frozenset()

    def build(
        self, listener: StoreListener | None = None, bootstrap_from: str | None = None
    ) -> GlobalStore:
        """The store these options describe, not started (check_discards first)."""
        listeners = () if listener is None else (listener,)
        return GlobalStore(config=self.config, listeners=listeners, bootstrap_from=bootstrap_from)

    def open(self, listener: StoreListener | None = None) -> GlobalStore:
        """A started store (its errors rise to the group, which explains them)."""
        self.check_discards()
        return self.build(listener).start(timeout=self.timeout)

    def check_discards(self) -> None:
        """Refuse options that would drop what the store has built, unless --redefine."""
        if not self.redefine:
            refuse_discarding(self.config)

    def open_for_queries(self) -> StoreReader:
        """A started store with the settings it records where no option gives them; or a
        read-only view of what it has written (said on stderr) when a running application
        holds the directory, or when it has indexes or a transform whose functions no option
        gives. Options given that disagree with the store are refused."""
        try:
            config = self.config if self.redefine else recorded(self.config, self.given)
            if config is not None:
                return dataclasses.replace(self, config=config).open()
            click.echo(
                f"{self.config.path} has indexes or a transform whose functions no option "
                "gives; answering read-only from what it holds, without catching up",
                err=True,
            )
        except StoreLocked as held:
            click.echo(f"{held}; answering read-only from what it has written", err=True)
        config = self.config
        return ReadOnlyStore(
            config.path,
            value_format=config.value_format,
            converters=config.converters,
            indexes=config.indexes,
        )


# The options named after the StoreConfig field they set.
_CONFIG_OPTIONS = ("topic", "bootstrap_servers", "path", "kafka_config", "allow_uncompacted")


def _given(params: dict[str, Any], name: str) -> bool:
    """Whether option `name` was given (on the command line or in its environment variable),
    not left to its default."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, click.core.ParameterSource.DEFAULT)


def store_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the shared options, and hand them to `command` as one StoreTarget argument."""

    @functools.wraps(command)
    def with_target(**params: Any) -> None:
        value_format, converters = chain(params.pop("value_format"), params.pop("converter"))
        transform = params.pop("transform")
        indexes, versions, selected = index_options(
            params.pop("index"), params.pop("index_version")
        )
        if selected and command.__name__ != "scan":
            raise click.BadParameter(
                f"{selected[0]!r} names no function: give --index NAME=PKG.MODULE:FUNCTION",
                param_hint="--index",
            )
        given = {
            "transform": transform is not None,
            "index": bool(indexes or versions),
            "ttl": params["ttl"] is not None,
            "history": params["history"] is not None,
            "invalid_values": _given(params, "invalid_values"),
        }
        config = StoreConfig(
            **{name: params.pop(name) for name in _CONFIG_OPTIONS},
            check_topic_config=not params.pop("skip_topic_config_check"),
            value_format=value_format,
            converters=converters,
            transform=None if transform is None else import_converter(transform, "--transform"),
            transform_version=params.pop("transform_version"),
            indexes=indexes,
            index_versions=versions,
            ttl=params.pop("ttl"),
            history=params.pop("history"),
            max_staleness=params.pop("max_staleness"),
            invalid_values=params.pop("invalid_values"),
        )
        target = StoreTarget(
            config,
            params.pop("timeout"),
            selected,
            params.pop("redefine"),
            frozenset(name for name, yes in given.items() if yes),
        )
        command(target, **params)

    options = [
        click.option("--topic", required=True, help="The compacted topic the store copies."),
        click.option(
            "--bootstrap-servers",
            default=DEFAULT_BOOTSTRAP,
            show_default=True,
            envvar=BOOTSTRAP_ENV,
            show_envvar=True,
            help="Kafka bootstrap address.",
        ),
        click.option(
            "--path",
            required=True,
            type=click.Path(file_okay=False, path_type=Path),
            help="Store directory (created if missing).",
        ),
        click.option(
            "--allow-uncompacted",
            is_flag=True,
            help="Accept a topic whose cleanup.policy lacks 'compact'.",
        ),
        click.option(
            "--skip-topic-config-check",
            is_flag=True,
            help="Do not read cleanup.policy / delete.retention.ms (for a principal without "
            "DescribeConfigs): compaction and the offline-age rebuild go unchecked.",
        ),
        click.option(
            "--timeout",
            default=60.0,
            show_default=True,
            help="Seconds to wait for the broker and the restore.",
        ),
        click.option(
            "--value-format",
            type=click.IntRange(1, 255),
            help="Value format to answer in (default: one past the converters' formats).",
        ),
        click.option(
            "--converter",
            multiple=True,
            metavar="PKG.MODULE:FUNCTION",
            help="A function turning a value into the next format; repeat in order, oldest "
            "format first (docs/store.md).",
        ),
        click.option(
            "--transform",
            metavar="PKG.MODULE:FUNCTION",
            help="The store's transform on ingest, fn(key, value) -> value or None "
            "(docs/store.md). Give the one the store was written with: with another, the "
            "command refuses (--redefine rebuilds the store).",
        ),
        click.option(
            "--transform-version",
            type=click.IntRange(1),
            default=1,
            show_default=True,
            help="The version of --transform, stored with the data.",
        ),
        click.option(
            "--index",
            multiple=True,
            metavar="NAME=PKG.MODULE:FUNCTION",
            help="A secondary index, fn(key, value) -> str, list of str or None "
            "(docs/store.md); repeat for each. Give all the store's indexes every time: "
            "without one, the command refuses (--redefine drops it). `scan --index NAME` "
            "queries one.",
        ),
        click.option(
            "--index-version",
            multiple=True,
            metavar="NAME=N",
            help="The version of an --index (default 1); a new version is rebuilt.",
        ),
        click.option(
            "--ttl",
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="Time to live: keys whose newest record is older are left out of every "
            "answer and purged from disk (docs/store.md). Give it every time: without it, "
            "the command refuses (--redefine drops the store's time index).",
        ),
        click.option(
            "--history",
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="Keep every version written within this window, for --as-of (docs/store.md). "
            "Give it every time: without it, the command refuses (--redefine drops the "
            "versions); turning it on rebuilds the store from the topic.",
        ),
        click.option(
            "--max-staleness",
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="Report the store stale (not ready: status, /readyz 503, globalstore_fresh 0) "
            "once it knows it last held the topic's end longer ago than this.",
        ),
        click.option(
            "--invalid-values",
            type=click.Choice([m.value for m in OnInvalidValue]),
            default=OnInvalidValue.STORE.value,
            show_default=True,
            help="A record whose value does not decode: store it as it came, or quarantine "
            "it (its key keeps its previous value; `globalstore quarantine` lists them). "
            "Give it every time: the other setting rebuilds the store (the command refuses "
            "without --redefine).",
        ),
        click.option(
            "--redefine",
            is_flag=True,
            help="Let these options drop an index or the time index the store has, or "
            "rebuild it with another --transform; without it the command refuses.",
        ),
    ]
    wrapped: Callable[..., None] = kafka_config_options(with_target)
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped
