"""A type checker in a user's project sees globalstore's types through the install `make`
makes (an editable one), and through the editable install the README tells a user to make
in their own environment, not Any: a misspelled setting, a wrong argument to wait_for, a
wrong key type are errors, on the sync faces and the asyncio ones alike."""

from __future__ import annotations

import re
import shutil
import site
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

MYPY = Path(sys.executable).with_name("mypy")

# Each line marked "# error" must be reported, and only those.
APP = """\
import asyncio
from globalstore import GlobalStore, SharedStore
from globalstore.aio import AsyncGlobalStore, AsyncSharedStore

store = GlobalStore("t", "127.0.0.1:9092", "state/t", ttl=3600, follow_batch_size=500)
typo = GlobalStore("t", "127.0.0.1:9092", "state/t", tll=3600)  # error
wrong = GlobalStore("t", "127.0.0.1:9092", "state/t", ttl="an hour")  # error
reveal_type(store.get)
reveal_type(store.status())
store.get(17)  # error
store.wait_for({0: 5, 1: 7}, timeout=2)
store.wait_for({"0": 5, "1": 7})
store.wait_for([5, 7])  # error
store.wait_for({0: "5"})  # error
SharedStore("state/t").wait_for({"2": 1})


async def main() -> None:
    async with AsyncGlobalStore("t", "127.0.0.1:9092", "state/t", ttl=60) as live:
        reveal_type(live.get)
        reveal_type(await live.wait_for({"0": 1}, timeout=5))
        await live.wait_for(5)  # error
        live.get_many(["a", "b"])
    AsyncGlobalStore("t", "127.0.0.1:9092", "state/t", max_stalenes=5)  # error
    async with AsyncSharedStore("state/t") as shared:
        reveal_type(shared.status())
        await shared.wait_until_ready(timeout=1)


asyncio.run(main())
import rocksdict  # noqa: E402
reveal_type(rocksdict.Rdict.keys)
"""


def test_a_user_project_type_checks_against_the_library(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    result = subprocess.run(
        [str(MYPY), "--no-incremental", "--strict", str(app)],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    out = result.stdout
    assert "import-not-found" not in out, out
    errors = {int(n) for n in re.findall(r"^app\.py:(\d+): error", out, re.MULTILINE)}
    marked = {n for n, line in enumerate(APP.splitlines(), 1) if line.endswith("# error")}
    assert errors == marked, out
    assert 'Unexpected keyword argument "tll"' in out
    assert 'Unexpected keyword argument "max_stalenes"' in out
    revealed = re.findall(r"Revealed type is \"(.*)\"", out)
    assert len(revealed) == 6, out
    assert not any(r.startswith("Any") for r in revealed), revealed
    assert revealed[0].startswith("def (key: str")  # the signature, not Any
    assert revealed[1] == "globalstore.read.protocols.StoreStatus"
    assert revealed[3] == "bool"
    # rocksdict's own types: the stub of the rocksdict calls storage/ makes (stubs/) is for
    # this repository's type checking and ships nowhere a user's type checker looks.
    assert "RdictKeys" in revealed[5], out


ROOT = Path(__file__).resolve().parents[2]


def test_the_editable_install_the_readme_gives_is_seen_by_mypy(tmp_path: Path) -> None:
    """A user's own environment: a new venv, this checkout installed as the README says (its
    dependencies come from this one's site-packages, so nothing else is downloaded but
    the build backend)."""
    checkout = tmp_path / "checkout"  # a copy: the install builds the C loop in place
    shutil.copytree(ROOT / "globalstore", checkout / "globalstore")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, checkout / name)
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    where = "import site; print(site.getsitepackages()[0])"
    packages = subprocess.run([str(python), "-c", where], check=True, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip
    Path(packages, "deps.pth").write_text(site.getsitepackages()[0] + "\n")
    command = "pip install -e path/to/globalstore --config-settings editable_mode=compat"
    assert command in (ROOT / "README.md").read_text()
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-e",
                    str(checkout), "--config-settings", "editable_mode=compat"],
                   check=True, capture_output=True)  # fmt: skip
    app = tmp_path / "app.py"
    app.write_text(
        'from globalstore import GlobalStore\nreveal_type(GlobalStore("t", "b", "p").get)\n'
    )
    result = subprocess.run([str(MYPY), "--strict", "--python-executable", str(python), str(app)],
                            check=False, cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert 'Revealed type is "def (key: str' in result.stdout, result.stdout
    assert result.returncode == 0, result.stdout


def test_every_c_module_ships_its_types() -> None:
    # A C module without its .pyi in the package data is Any to a user's type checker.
    root = Path(__file__).resolve().parents[2]
    with (root / "pyproject.toml").open("rb") as f:
        shipped = set(tomllib.load(f)["tool"]["setuptools"]["package-data"]["globalstore"])
    modules = [
        c.relative_to(root / "globalstore").with_suffix(".pyi").as_posix()
        for c in sorted((root / "globalstore").rglob("*.c"))
        if "PyInit_" in c.read_text()
    ]
    assert len(modules) >= 5
    assert [m for m in modules if m not in shipped or not (root / "globalstore" / m).exists()] == []
