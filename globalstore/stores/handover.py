"""The one way a store's settings and functions go to another process the project starts:
the writer process of SharedStore.with_writer() and the workers of `serve --workers`.

A Handover is encoded once in the parent (JSON text) and travels through a pipe only the
child reads: the writer's standard input, or the pipe multiprocessing spawns a worker with.
So the Kafka credentials and the token are in no command line, no environment and no file.
The same pipe is then the child's lifeline (lifeline.py).

Functions (transform, indexes, converters) travel by import name, with the file the parent
found their module in: the child imports each by name and refuses one that comes from
another file (a module of the same name planted earlier on its path, or one the parent had
put in sys.modules by hand). The child runs with `-P` and the parent's import path
(child_command()), so it searches the places the parent searched, in the same order, and
never its working directory unless the parent did.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from globalstore.config import RocksDBOptions, StoreSettings, ValueCache
from globalstore.converters import import_converter, import_name
from globalstore.errors import ConfigurationError

__all__ = ["Handover", "child_command", "child_environment"]

_FUNCTIONS = ("converters", "indexes")  # settings that map a name or number to a function


@dataclasses.dataclass(frozen=True)
class Handover:
    """What another process opens a store with, as the parent was told it."""

    topic: str
    bootstrap_servers: str | None
    path: str  # absolute: the child may not share the parent's working directory
    kafka_config: dict[str, Any]
    settings: dict[str, Any]  # StoreSettings, functions as {"name", "file"}, as encode() wrote
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # the child's own part

    @classmethod
    def of(
        cls,
        topic: str,
        bootstrap_servers: str | None,
        path: str | Path,
        kafka_config: Mapping[str, Any] | None,
        settings: StoreSettings | Mapping[str, Any],
        extra: Mapping[str, Any] | None = None,
    ) -> Handover:
        """The handover of these settings; ConfigurationError for a function another
        process cannot import by name (a lambda, one defined in the script that runs)."""
        sent: dict[str, Any] = dict(settings)
        if "rocksdb" in sent:
            sent["rocksdb"] = dataclasses.asdict(sent["rocksdb"])
        if sent.get("value_cache") is not None:
            sent["value_cache"] = dataclasses.asdict(sent["value_cache"])
        if sent.get("transform") is not None:
            sent["transform"] = _named(sent["transform"], "transform")
        for name in _FUNCTIONS:
            if sent.get(name) is not None:
                sent[name] = {
                    # A declared index (a field's path) is a str: sent as it is.
                    str(k): f if isinstance(f, str) else _named(f, f"{name}[{k!r}]")
                    for k, f in sent[name].items()
                }
        return cls(
            topic,
            bootstrap_servers,
            str(Path(path).absolute()),
            dict(kafka_config or {}),
            sent,
            dict(extra or {}),
        )

    def encode(self) -> str:
        """One line of JSON."""
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Handover:
        """The handover encode() wrote; ValueError if `text` is not one."""
        body = json.loads(text)
        if not isinstance(body, dict) or body.keys() != {f.name for f in dataclasses.fields(cls)}:
            raise ValueError("not a store's handover")
        return cls(**body)

    def store_settings(self) -> dict[str, Any]:
        """The settings as a store takes them: functions imported by name and checked to
        come from the parent's file (ConfigurationError otherwise), RocksDB options rebuilt."""
        settings = dict(self.settings)
        if "rocksdb" in settings:
            settings["rocksdb"] = RocksDBOptions(**settings["rocksdb"])
        if settings.get("value_cache") is not None:
            settings["value_cache"] = ValueCache(**settings["value_cache"])
        if settings.get("transform") is not None:
            settings["transform"] = _imported(settings["transform"], "transform")
        for name in _FUNCTIONS:
            if settings.get(name) is not None:
                settings[name] = {
                    k: f if isinstance(f, str) else _imported(f, f"{name}[{k}]")
                    for k, f in settings[name].items()
                }
        if settings.get("converters") is not None:  # JSON made the format numbers strings
            settings["converters"] = {int(k): f for k, f in settings["converters"].items()}
        return settings


def child_command(module: str) -> list[str]:
    """The command line of a child running `module`: `-P`, so that neither its working
    directory nor a script's directory comes first on its import path."""
    return [sys.executable, "-P", "-m", module]


def child_environment() -> dict[str, str]:
    """This process's environment with its import path as PYTHONPATH: the child imports
    the functions by name, and the same globalstore, from where this process found them
    (this process's working directory only if its own path has it)."""
    path = os.pathsep.join(entry or os.getcwd() for entry in sys.path)
    return {**os.environ, "PYTHONPATH": path}


def _named(function: Callable[..., Any], what: str) -> dict[str, str | None]:
    name = import_name(function, what)
    return {"name": name, "file": _module_file(name)}


def _imported(named: Mapping[str, Any], what: str) -> Callable[..., Any]:
    name, file = named["name"], named["file"]
    try:
        function = import_converter(name)
    except ValueError as exc:
        raise ConfigurationError(f"{what}: {exc}") from None
    here = _module_file(name)
    if here != file:
        raise ConfigurationError(
            f"{what} {name} comes from {here} in this process, but from {file} in the "
            "process that started it: refused (a module of that name earlier on the path?)"
        )
    return function


def _module_file(name: str) -> str | None:
    """The real path of the file the module of 'pkg.module:function' was loaded from
    (None for a module without one)."""
    module = sys.modules.get(name.partition(":")[0])
    file = getattr(module, "__file__", None)
    return None if file is None else os.path.realpath(file)
