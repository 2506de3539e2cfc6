"""Every module of globalstore/ says which of its names are its interface: `__all__` lists
every top-level name it defines without a leading underscore (a name with one is the
module's own), and may add names it hands on."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "globalstore"


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_") and n != "log"}


def _declared(tree: ast.Module) -> set[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return None


def test_every_module_declares_its_public_names() -> None:
    wrong = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        defined, declared = _defined(tree), _declared(tree)
        if path.name == "__init__.py" and declared is None and not defined:
            continue  # a package's docstring only
        if declared is None or not defined <= declared:
            wrong[str(path.relative_to(PACKAGE))] = (declared, defined)
    assert len(list(PACKAGE.rglob("*.py"))) > 100  # the walk found the modules
    assert wrong == {}
