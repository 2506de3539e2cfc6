"""`--value-format` and `--converter pkg.module:function`: the value formats a store command
answers in, and the user's converters, imported by name (and `--transform` and `--index
NAME=pkg.module:function`, named alike)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from globalstore import converters

__all__ = ["Converters", "chain", "import_converter", "index_options"]

Converters = dict[int, Callable[[Any], Any]]


def import_converter(spec: str, option: str = "--converter") -> Callable[..., Any]:
    """The function named by 'pkg.module:function', or a usage error of `option` saying
    what is wrong."""
    try:
        return converters.import_converter(spec)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def index_options(
    specs: tuple[str, ...], versions: tuple[str, ...]
) -> tuple[dict[str, Callable[..., Any]], dict[str, int], tuple[str, ...]]:
    """({name: function}, {name: version}, bare names) of `--index NAME=PKG.MODULE:FUNCTION`
    (a definition) or `--index NAME` (scan: the index to query), and `--index-version NAME=N`."""
    functions: dict[str, Callable[..., Any]] = {}
    bare: list[str] = []
    for spec in specs:
        name, sep, target = spec.partition("=")
        if not sep:
            bare.append(spec)
            continue
        if name in functions:
            raise click.BadParameter(f"index {name!r} is given twice", param_hint="--index")
        functions[name] = import_converter(target, f"--index {name}")
    numbers: dict[str, int] = {}
    for spec in versions:
        name, sep, number = spec.partition("=")
        if not sep or not number.strip().isdigit():
            raise click.BadParameter(f"{spec!r} is not NAME=N", param_hint="--index-version")
        numbers[name] = int(number)
    return functions, numbers, tuple(bare)


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
