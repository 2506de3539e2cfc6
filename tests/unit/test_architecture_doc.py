"""docs/architecture.md draws the floors of globalstore/ from the `layers` contract in
pyproject.toml (which `lint-imports` enforces), so the picture cannot drift from the rule.

    python -m tests.unit.test_architecture_doc     rewrites the drawing from the contract
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- floors: drawn from pyproject.toml by tests/unit/test_architecture_doc.py -->"
END = "<!-- end of floors -->"


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers: list[str] = next(c["layers"] for c in contracts if c["type"] == "layers")
    return layers


def drawing() -> str:
    """The floors, top first, numbered from the ground; `a | b` never import each other."""
    layers = _layers()
    rows = [f"{len(layers) - i:>2}  {layer}" for i, layer in enumerate(layers)]
    return "\n".join([BEGIN, "```", *rows, "```", END])


def _drawn(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def test_the_doc_draws_the_contract() -> None:
    text = DOC.read_text()
    assert _drawn(text) == drawing(), "run: python -m tests.unit.test_architecture_doc"
    assert "cli" in drawing() and "storage" in drawing()  # the contract was read


if __name__ == "__main__":
    current = DOC.read_text()
    DOC.write_text(current.replace(_drawn(current), drawing()))
