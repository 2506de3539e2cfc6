"""Kafka client settings have one spelling: librdkafka's names (DESIGN contract 6).

The store, `serve`, every CLI command and the pipelines take them the same three ways, and
this module is where those ways are read and merged:

    --kafka-config KEY=VALUE     repeatable; wins over the file
    --kafka-config-file PATH     a properties file, like Kafka's own tools' --command-config
    GLOBALSTORE_KAFKA_CONFIG_FILE names that file, so secrets stay out of `ps` and compose files

Secrets (passwords, keys, JAAS lines) are masked wherever a setting is shown: `masked()` for
a mapping, `ClientSettings` for one that prints itself, `mask_text()` for a message that may
quote a value.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from globalstore.errors import ConfigurationError

__all__ = [
    "KAFKA_CONFIG_FILE_ENV",
    "MASK",
    "ClientSettings",
    "client_settings",
    "is_secret",
    "kafka_config_given",
    "kafka_config_options",
    "mask_text",
    "masked",
    "parse_pairs",
    "read_properties",
]

KAFKA_CONFIG_FILE_ENV = "GLOBALSTORE_KAFKA_CONFIG_FILE"
MASK = "********"
# A name holding any of these words holds a secret: sasl.password, ssl.key.password,
# ssl.keystore.password, sasl.jaas.config (it carries the password), ssl.key.pem,
# ssl.keystore.key, sasl.oauthbearer.client.secret, sasl.oauthbearer.config (may carry a
# clientSecret), *.private.key.passphrase, ... and the certificates Java masks as well.
_SECRET_WORDS = (
    "password", "secret", "jaas", ".pem", "keystore.key", "token", "credential", "passphrase",
    "oauthbearer.config", "certificate.chain", "truststore.certificates",
)  # fmt: skip

_Command = TypeVar("_Command", bound=Callable[..., Any])


def is_secret(name: str) -> bool:
    """True for a setting whose value must never be shown (passwords, keys, tokens)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def masked(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with every secret value replaced by MASK, for showing them."""
    return {name: MASK if is_secret(name) else value for name, value in settings.items()}


def mask_text(text: str, settings: Mapping[str, Any]) -> str:
    """`text` with any secret value of `settings` in it replaced by MASK (a client's error
    may quote the value it refused)."""
    for name, value in settings.items():
        if is_secret(name) and isinstance(value, str) and value:
            text = text.replace(value, MASK)
    return text


class ClientSettings(Mapping[str, Any]):
    """A read-only mapping of client settings whose repr masks the secrets, so a config
    object that holds one can be printed or logged as it is."""

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        self._settings = dict(settings or {})

    def __getitem__(self, name: str) -> Any:
        return self._settings[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._settings == dict(other)

    def __hash__(self) -> int:
        return hash(tuple(sorted(masked(self._settings).items(), key=str)))

    def __repr__(self) -> str:
        return repr(masked(self._settings))


def read_properties(path: Path | str) -> dict[str, str]:
    """The settings of a Java-style properties file: `key=value` (or `key: value`) lines,
    `#` and `!` comments, blank lines, a trailing backslash continuing a line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(f"cannot read Kafka client settings from {path}: {exc}") from exc
    settings: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split_property(line)
        if not key:
            raise ConfigurationError(f"{path}:{number}: expected KEY=VALUE, got {_shown(line)!r}")
        settings[key] = value
    return settings


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for each setting, continuation lines joined, comments dropped."""
    pending, first = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line.startswith(("#", "!"))):
            continue
        first = first or number
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        yield first, pending + line
        pending, first = "", 0
    if pending:
        yield first, pending


def _split_property(line: str) -> tuple[str, str]:
    """(key, value) at the first '=' or ':'; ("", "") when the line has neither."""
    cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
    if cut < 0:
        return "", ""
    return line[:cut].strip(), line[cut + 1 :].strip()


def _shown(malformed: str) -> str:
    """A malformed setting as an error may quote it: never what may be a secret, only the
    name, which tells which setting is wrong."""
    if not is_secret(malformed):
        return malformed
    name = re.split(r"[\s=:]", malformed.strip(), maxsplit=1)[0]
    return f"{name}=..."


def parse_pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    """{KEY: VALUE} from repeated KEY=VALUE options, or a usage error naming `option`."""
    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or any(c.isspace() for c in key.strip()):
            raise click.BadParameter(f"expected KEY=VALUE, got {_shown(item)!r}", param_hint=option)
        settings[key.strip()] = value.strip()
    return settings


def client_settings(pairs: Mapping[str, str], file: Path | str | None = None) -> dict[str, str]:
    """The settings of `file` (if any), overridden by the KEY=VALUE `pairs`."""
    from_file = read_properties(file) if file else {}
    return {**from_file, **pairs}


def kafka_config_given(params: Mapping[str, Any]) -> tuple[dict[str, str], Path | None]:
    """The --kafka-config pairs (over the deprecated --kafka-option) and --kafka-config-file
    of a command's parsed `params`, as given: client_settings() merges them."""
    legacy = parse_pairs(params["kafka_option"], "--kafka-option")
    pairs = {**legacy, **parse_pairs(params["kafka_config_pairs"], "--kafka-config")}
    return pairs, params["kafka_config_file"]


def kafka_config_options(command: _Command) -> _Command:
    """Add --kafka-config, --kafka-config-file (and the hidden, deprecated --kafka-option) to
    a click command, and hand it their merged settings as one `kafka_config` dict."""

    @functools.wraps(command)
    def with_settings(**params: Any) -> Any:
        if params["kafka_option"]:
            click.echo("warning: --kafka-option is deprecated; use --kafka-config", err=True)
        pairs, file = kafka_config_given(params)
        for name in ("kafka_option", "kafka_config_pairs", "kafka_config_file"):
            del params[name]
        try:
            params["kafka_config"] = client_settings(pairs, file)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint="--kafka-config-file") from exc
        return command(**params)

    options = [
        click.option(
            "--kafka-config",
            "kafka_config_pairs",
            multiple=True,
            metavar="KEY=VALUE",
            help="Kafka client setting with librdkafka's name, e.g. security.protocol=SASL_SSL "
            "(repeatable; wins over the file).",
        ),
        click.option(
            "--kafka-config-file",
            type=click.Path(dir_okay=False, path_type=Path),
            envvar=KAFKA_CONFIG_FILE_ENV,
            show_envvar=True,
            help="Properties file of Kafka client settings (KEY=VALUE lines), e.g. the "
            "credentials; keeps secrets off the command line.",
        ),
        click.option("--kafka-option", "kafka_option", multiple=True, hidden=True),
    ]
    wrapped: Callable[..., Any] = with_settings
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped  # type: ignore[return-value]
