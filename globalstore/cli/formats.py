"""`--value-format` and `--converter pkg.module:function`: the value formats a store command
answers in, and the user's converters, imported by name (and `--transform`, named alike)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from globalstore import converters

Converters = dict[int, Callable[[Any], Any]]


def import_converter(spec: str, option: str = "--converter") -> Callable[..., Any]:
    """The function named by 'pkg.module:function', or a usage error of `option` saying
    what is wrong."""
    try:
        return converters.import_converter(spec)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def chain(value_format: int | None, specs: tuple[str, ...]) -> tuple[int, Converters]:
    """(value format, {from_version: converter}): the converters, in the order given, lead
    one format at a time to `value_format` (default: one past as many formats as there are
    converters, so `--converter a --converter b` reads formats 1 and 2 as format 3)."""
    current = value_format if value_format is not None else len(specs) + 1
    first = current - len(specs)
    if first < 0:
        raise click.BadParameter(
            f"{len(specs)} converters cannot lead to value format {current}",
            param_hint="--converter",
        )
    return current, {first + i: import_converter(spec) for i, spec in enumerate(specs)}
