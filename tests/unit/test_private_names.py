"""No module of the package reaches into another's private names: a name with a leading `_`
is read only through `self` or `cls` (its own object), and a private module only from its own
package. What is left is other libraries' own spellings: confluent-kafka's KafkaError codes
(its documented constants start with `_`) and a named tuple's `_make` / `_replace`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "globalstore"
_THEIRS = {"_make", "_replace", "_asdict", "_fields"}  # namedtuple's public API


def _reaches(path: Path, package: str) -> list[str]:
    """Where the module at `path`, of `package`, reads another object's or module's private
    name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls", "KafkaError"):
                continue
            if node.attr not in _THEIRS:
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module != package:
            found += [
                f"{path.name}:{node.lineno} from {node.module} import {a.name}"
                for a in node.names
                if _private(a.name)
            ]
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_reads_another_ones_private_names() -> None:
    found = [
        f"{path.parent.relative_to(ROOT.parent)}/{reach}"
        for path in sorted(ROOT.rglob("*.py"))
        for reach in _reaches(path, ".".join(path.relative_to(ROOT.parent).parent.parts))
    ]
    assert found == []


def test_the_check_sees_a_reach_in(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "from globalstore.follow import _native\nfrom globalstore.read.queries import _MISSING\n"
        "def peek(store):\n    return store._source, self._mine, KafkaError._TRANSPORT\n"
    )
    assert _reaches(module, "globalstore.follow") == [
        "probe.py:2 from globalstore.read.queries import _MISSING",
        "probe.py:4 store._source",
    ]
