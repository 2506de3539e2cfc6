"""`--value-format` and `--converter pkg.module:function`: the value formats a store command
answers in, and the user's converters, imported by name."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import click

Converters = dict[int, Callable[[Any], Any]]


def import_converter(spec: str) -> Callable[[Any], Any]:
    """The function named by 'pkg.module:function', or a usage error saying what is wrong."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise click.BadParameter(
            f"expected pkg.module:function, got {spec!r}", param_hint="--converter"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="--converter"
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise click.BadParameter(
            f"{module_name} has no function {name!r}", param_hint="--converter"
        )
    converter: Callable[[Any], Any] = function
    return converter


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
