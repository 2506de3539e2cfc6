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
    "globalstore.kafka_settings",
    "globalstore.kafka_clients",
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
