"""Every repository path the code and the docs name exists, and every link between the docs
resolves, down to the heading it points at.

A path is named as `<top>/...` with `<top>` one of the repository's top-level directories
below, or as `README.md`; it is looked for in the code's comments, docstrings and strings
(`*.py`, `*.pyi`, `*.c`, `*.sh`, `*.toml`, `Makefile`), in README.md and in docs/*.md. Not
paths: a URL (the top follows a `/` or a `:`), a name inside another path (`.globalstore/...`,
`<store>/readers/...`), a docker image (`<top>/<name>:<tag>`, no file suffix), a placeholder
or a pattern (the name runs into `<`, `{`, `*` or `$`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("globalstore", "pipelines", "tests", "benchmarks", "docs", "compose", "examples")
SUFFIXES = {".py", ".pyi", ".c", ".sh", ".toml"}
SKIP_DIRS = {"__pycache__", ".git", ".venv", "target", "build", "dist", "node_modules"}
# Named on purpose although not in the repository: files a user creates.
USER_FILES = {"compose/.env"}

PATH = re.compile(
    r"(?<![\w./:<>@~-])"  # not the tail of a URL, of another path or of a placeholder
    r"((?:" + "|".join(TOPS) + r")/[\w./-]*[\w-]|README\.md)"
    r"(?P<after>.?.?)"
)
IMAGE_TAG = re.compile(r":\w")  # `globalstore/kafka:4.1.1`, not `globalstore/config.py:12`
PLACEHOLDER = re.compile(r"^[<{*$]")


def _sources() -> Iterator[Path]:
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").glob("*.md"))
    for name in ("Makefile", "pyproject.toml", "setup.py"):
        if (ROOT / name).exists():
            yield ROOT / name
    for top in TOPS:
        for path in sorted((ROOT / top).rglob("*")):
            if SKIP_DIRS.intersection(path.relative_to(ROOT).parts) or not path.is_file():
                continue
            if path.suffix in SUFFIXES or path.name == "Makefile":
                yield path


def named_paths(text: str) -> Iterator[tuple[int, str]]:
    """(line number, path) for each repository path `text` names; see the module's doc."""
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            path, after = match.group(1), match.group("after")
            if PLACEHOLDER.match(after):
                continue
            last = path.rsplit("/", 1)[-1]
            if "." not in last and IMAGE_TAG.match(after):
                continue
            yield number, path


def test_named_paths_exist() -> None:
    missing = [
        f"{source.relative_to(ROOT)}:{number}: {path}"
        for source in _sources()
        for number, path in named_paths(source.read_text(errors="replace"))
        if path not in USER_FILES and not (ROOT / path).exists()
    ]
    assert not missing, "paths named but not in the repository:\n" + "\n".join(missing)


def test_the_pattern() -> None:
    text = "\n".join(
        [
            "see globalstore/storage/meta.py, and docs/store.md#memory.",
            "image globalstore/kafka:4.1.1; at globalstore/follow/native.py:12",
            "https://example.org/globalstore/x.py and .globalstore/checkpoints/x",
            "docs/img/scale-{name}.png, compose/*/Dockerfile, <store>/tests/x, README.md",
        ]
    )
    assert [p for _, p in named_paths(text)] == [
        "globalstore/storage/meta.py",
        "docs/store.md",
        "globalstore/follow/native.py",
        "README.md",
    ]


# -- links between the Markdown files ---------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_markdown_links_resolve() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "benchmarks" / "results").glob("*.md"))
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # a URL or mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)
