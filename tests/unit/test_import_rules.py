"""The house rules of docs/architecture.md, read off the code: who may import whom."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What pipelines/ may use of the library: the topic contract, its errors, shared defaults,
# the value format converters (a topic rewrite names its converter like the store does), the
# Kafka client settings and what every librdkafka client shares (DESIGN contract 6).
PIPELINES_MAY_USE = {
    "globalstore.codec",
    "globalstore.errors",
    "globalstore.config",
    "globalstore.converters",
    "globalstore.kafka.settings",
    "globalstore.kafka.clients",
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(package: str) -> dict[str, set[str]]:
    return {
        str(path.relative_to(ROOT)): _imports(path)
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_rules_see_every_module() -> None:
    # Not vacuous: the walk finds the modules and the imports the rules are about.
    library, pipelines = _modules("globalstore"), _modules("pipelines")
    assert "globalstore/cli/__init__.py" in library and "pipelines/cli.py" in pipelines
    assert any(_within(n, "pipelines") for n in library["globalstore/demo/run.py"])
    assert "globalstore.codec" in pipelines["pipelines/records.py"]
    assert "confluent_kafka" in library["globalstore/follow/sources.py"]


def test_only_the_cli_and_the_demo_import_pipelines() -> None:
    offenders = [
        module
        for module, names in _modules("globalstore").items()
        if any(_within(n, "pipelines") for n in names)
        and not module.startswith(("globalstore/cli/", "globalstore/demo/"))
    ]
    assert offenders == []


def test_pipelines_use_only_the_topic_contract_of_the_library() -> None:
    used = {
        (module, name)
        for module, names in _modules("pipelines").items()
        for name in names
        if _within(name, "globalstore") and name not in PIPELINES_MAY_USE
    }
    assert used == set()


def test_nothing_imports_the_cli() -> None:
    offenders = [
        module
        for package in ("globalstore", "pipelines")
        for module, names in _modules(package).items()
        if any(_within(n, "globalstore.cli") for n in names)
        and not module.startswith("globalstore/cli/")
    ]
    assert offenders == []


def test_the_store_does_not_depend_on_the_dev_broker_or_the_demo() -> None:
    offenders = [
        module
        for module, names in _modules("globalstore").items()
        if any(
            _within(n, "globalstore.localkafka") or _within(n, "globalstore.demo") for n in names
        )
        and not module.startswith(
            ("globalstore/cli/", "globalstore/demo/", "globalstore/localkafka/")
        )
    ]
    assert offenders == []


# The store's modules in floors, ground first: a module imports its own floor or lower ones,
# never higher (docs/architecture.md draws them). cli/, server/ and demo/ stand on top and
# may use any; localkafka/ stands apart.
FLOORS = (
    # what everything speaks: errors, states, the topic contract, client settings, events
    (
        "errors",
        "status",
        "codec",
        "converters",
        "kafka.settings",
        "kafka.clients",
        "storage.meta",
        "listeners",
        "follow.health",
        "waiting",
    ),
    # settings; the contract of every store face
    ("config", "read.protocols"),
    # RocksDB and every byte layout on disk; what the broker says; the C loop; how a writer
    # wakes reader processes
    ("storage", "follow.topic", "follow.native", "replicas.announce"),
    # formats, the transform, index functions and the ttl; planning; snapshots and their
    # manifest; reads and exports
    (
        "shaping.migrate",
        "shaping.transform",
        "shaping.indexes",
        "shaping.ttl",
        "follow.plan",
        "snapshots.archive",
        "snapshots.manifest",
        "snapshots.digests",
        "read.queries",
        "read.arrow",
    ),
    (
        "follow.prepare",
        "follow.sources",
        "follow.events",
        "follow.progress",
    ),  # what the store thread is made of
    ("follow.thread",),  # the loop
    ("replicas.heal",),  # replicas, the one swap, self-healing
    (
        "stores.global_store",
        "stores.read_only_store",
        "stores.shared_store",
    ),  # the faces: GlobalStore, ReadOnlyStore, SharedStore
    ("stores.switching_store",),  # SwitchingStore, over GlobalStores
)
_FLOOR = {name: floor for floor, names in enumerate(FLOORS) for name in names}
_ON_TOP = (
    "globalstore/cli/",
    "globalstore/server/",
    "globalstore/demo/",
    "globalstore/localkafka/",
)


def _floor_name(dotted: str) -> str:
    """The name a module has in FLOORS: its path under globalstore (storage/ counts once,
    but for meta.py, which everything speaks)."""
    if dotted.startswith("storage.") and dotted != "storage.meta":
        return "storage"
    return dotted


def _library_names(path: Path) -> set[str]:
    """The globalstore modules `path` imports, by their name under globalstore/."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "globalstore":
            names.update("globalstore." + alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {
        _floor_name(n.removeprefix("globalstore.")) for n in names if n.startswith("globalstore.")
    }


def _store_modules() -> dict[str, Path]:
    """{name in FLOORS: file} of the store's own modules (storage/ counts once)."""
    found = {}
    for path in sorted((ROOT / "globalstore").rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        dotted = relative.removeprefix("globalstore/").removesuffix(".py").replace("/", ".")
        if relative.startswith(_ON_TOP) or (
            dotted.endswith("__init__") and dotted != "storage.__init__"
        ):
            continue  # the packages' faces hold a docstring only, storage's excepted
        found[relative] = path
    return found


def _module_name(relative: str) -> str:
    return _floor_name(relative.removeprefix("globalstore/").removesuffix(".py").replace("/", "."))


def test_every_store_module_has_a_floor() -> None:
    names = {_module_name(relative) for relative in _store_modules()}
    assert names - set(_FLOOR) == set()
    assert set(_FLOOR) - names == set()  # and the floors name no module that is gone


def test_no_import_runs_upward() -> None:
    upward = []
    for relative, path in _store_modules().items():
        own = _FLOOR[_module_name(relative)]
        for name in _library_names(path):
            if name in _FLOOR and _FLOOR[name] > own:
                upward.append(f"{relative} -> {name}")
    assert upward == []


def test_only_storage_imports_rocksdict() -> None:
    offenders = [
        module
        for package in ("globalstore", "pipelines")
        for module, names in _modules(package).items()
        if "rocksdict" in names and not module.startswith("globalstore/storage/")
    ]
    assert offenders == []


def test_storage_never_sees_a_kafka_client() -> None:
    # It takes plain records; the consumer and its messages are the sources' (sources.py).
    offenders = [
        module
        for module, names in _modules("globalstore").items()
        if module.startswith("globalstore/storage/")
        and any(_within(n, "confluent_kafka") for n in names)
    ]
    assert offenders == []


def test_one_pipeline_never_imports_another() -> None:
    # What two jobs share lives in a module of its own (pipelines/order_events/).
    jobs = ("orders", "couriers")
    offenders = [
        (module, name)
        for module, names in _modules("pipelines").items()
        for job in jobs
        if module.startswith(f"pipelines/{job}/")
        for other in jobs
        if other != job
        for name in names
        if _within(name, f"pipelines.{other}")
        and not module.endswith("reference.py")  # the oracles: couriers' builds on orders'
    ]
    assert offenders == []
