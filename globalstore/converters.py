"""Value format versions and the user's converters between them.

Every record declares its value format in the topic contract's header, and the store keeps it
in the value's on-disk header (codec.HEADER). An application that reads format N registers
converters {from_version: function}: each turns a decoded value of that format into a value
of the next one. Every query then answers in format N:
  * lazily: decoder() converts an older value when it is read;
  * eagerly: migrate.Migration rewrites the stored values in resumable chunks, in the
    background, after which reads take the one-comparison fast path again.
A converter that raises leaves the stored value as it was: reading it raises
ConversionFailed (key, partition, offset and format), and the eager pass counts it and goes on.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from globalstore import codec
from globalstore.errors import ConfigurationError, ConversionFailed, InvalidValue

__all__ = ["Converter", "ValueFormats", "decoder", "import_converter", "import_name"]

Converter = Callable[[Any], Any]
_MAX_FORMAT = 255  # the on-disk header keeps the format in one byte


@dataclass(frozen=True)
class ValueFormats:
    """The format queries answer in (`current`) and the converters that lead to it."""

    current: int = codec.VALUE_FORMAT_VERSION
    converters: Mapping[int, Converter] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = _problem(self.current, self.converters)
        if problem is not None:
            raise ConfigurationError(problem)

    @property
    def plain(self) -> bool:
        """Nothing to convert: the library's own format and no converters."""
        return self.current == codec.VALUE_FORMAT_VERSION and not self.converters

    def reads(self, version: int) -> bool:
        """Whether a value stored in format `version` can be answered, as it is or converted."""
        return version == self.current or version in self.converters

    def upgrade(self, value: Any, version: int) -> Any:
        """`value`, of format `version`, brought to the current format."""
        for step in range(version, self.current):
            value = self.converters[step](value)
        return value

    def convert(self, raw: bytes, key: bytes, topic: str) -> Any:
        """The current-format value of on-disk bytes in any readable format: InvalidValue for
        an unreadable format or JSON, ConversionFailed when a converter raises."""
        version = codec.stored_format(raw)
        if not self.reads(version):
            _, partition, offset = codec.origin(raw)
            raise InvalidValue(topic, key, partition, offset, self._unreadable(version))
        value = codec.parse_json(raw, key, topic)
        if version == self.current:
            return value
        try:
            return self.upgrade(value, version)
        except Exception as exc:
            _, partition, offset = codec.origin(raw)
            raise ConversionFailed(topic, key, partition, offset, version, exc) from exc

    def rewrite(self, raw: bytes, key: bytes, topic: str) -> bytes | None:
        """On-disk bytes of a layout-1 value in an older readable format, converted to the
        current one (record timestamp and origin kept); None if there is nothing to do."""
        if raw[:1] != b"\x01" or len(raw) < codec.HEADER_SIZE:
            return None
        version = raw[1]
        if version == self.current or version not in self.converters:
            return None
        _, _, ts, partition, offset = codec.HEADER.unpack_from(raw)
        value = orjson.dumps(self.convert(raw, key, topic))
        return codec.HEADER.pack(codec.LAYOUT_VERSION, self.current, ts, partition, offset) + value

    def _unreadable(self, version: int) -> str:
        if version == codec.UNREADABLE_FORMAT:
            return codec.unknown_format(bytes((version,)))
        known = ", ".join(str(v) for v in sorted(self.converters))
        via = f" (converters from {known})" if known else ""
        return (
            f"value format {version} is not readable: this store reads format {self.current}{via}"
        )


def _problem(current: int, converters: Mapping[int, Converter]) -> str | None:
    if not 1 <= current <= _MAX_FORMAT:
        return f"value_format must be between 1 and {_MAX_FORMAT}, not {current}"
    for version, convert in converters.items():
        if not 0 <= version < current:
            return f"a converter from value format {version} cannot lead to value_format {current}"
        if not callable(convert):
            return f"the converter from value format {version} is not callable: {convert!r}"
    missing = sorted({step for v in converters for step in range(v, current)} - set(converters))
    if missing:
        return (
            f"converters must lead to value_format {current} one format at a time: "
            f"missing the converter from format {missing[0]}"
        )
    return None


def import_converter(spec: str) -> Converter:
    """The function named by 'pkg.module:function' (for the command lines); ValueError
    saying what is wrong otherwise."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"expected pkg.module:function, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"{module_name} has no function {name!r}")
    converter: Converter = function
    return converter


def import_name(function: Callable[..., Any], what: str) -> str:
    """'pkg.module:function', the name import_converter() finds `function` by in another
    process; ConfigurationError naming `what` for a function it cannot find (a lambda, a
    nested function, one defined in the __main__ script)."""
    name = f"{getattr(function, '__module__', None)}:{getattr(function, '__qualname__', None)}"
    try:
        found = None if name.startswith("__main__:") else import_converter(name)
    except ValueError:
        found = None
    if found is not function:
        raise ConfigurationError(
            f"{what} must be a module-level function another process can import by name "
            f"(pkg.module:function), not {function!r}: define it in a module, not in the "
            "script that runs"
        )
    return name


def decoder(formats: ValueFormats) -> codec.Decode:
    """The decode function of a store: codec.decode itself when there is nothing to convert;
    else the same fast path for values in the current format, converting the rest."""
    if formats.plain:
        return codec.decode
    current, size, loads = formats.current, codec.HEADER_SIZE, orjson.loads

    def decode(raw: bytes, key: bytes, topic: str) -> Any:
        if len(raw) > size and raw[0] == 1 and raw[1] == current:
            try:
                return loads(raw[size:])
            except orjson.JSONDecodeError:
                pass  # convert() raises InvalidValue naming the record
        return formats.convert(raw, key, topic)

    return decode
