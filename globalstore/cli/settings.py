"""KEY=VALUE options shared by the command groups (`kafka start --set`, `--kafka-config`)."""

from __future__ import annotations

import click


def parse_settings(items: tuple[str, ...], option: str) -> dict[str, str]:
    """{KEY: VALUE} from repeated KEY=VALUE options, or a usage error naming `option`."""
    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        settings[key.strip()] = value.strip()
    return settings
