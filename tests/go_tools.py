"""Tools the tests run that are written in Go (Toxiproxy's server, kubeconform): each built
once with `go install` from the Go module proxy and cached beside Kafka's jars, by module
and version."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from globalstore.localkafka.jars import cache_root

_BUILD_TIMEOUT_S = 600
_GO_FALLBACK = "/usr/local/go/bin/go"  # where the Go toolchain sits when it is not on PATH


def go_binary(module: str, version: str, name: str, cache_dir: Path | None = None) -> Path:
    """The command `module` (a Go package path) at `version`, cached as `name`: built on
    first use into the cache (a scratch directory renamed at the end, so an interrupted
    build never leaves a binary that looks usable)."""
    target = (cache_dir or cache_root()) / name / version / name
    if target.exists():
        return target
    go = shutil.which("go") or (_GO_FALLBACK if Path(_GO_FALLBACK).exists() else None)
    if go is None:
        raise RuntimeError(
            f"the tests build {name} with Go (`go install {module}@{version}`), and no `go` "
            f"was found: install Go 1.17 or newer"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as scratch:
        result = subprocess.run(
            [go, "install", f"{module}@{version}"],
            env={**os.environ, "GOBIN": scratch},
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"building {name} {version} failed:\n{result.stderr[-3000:]}")
        Path(scratch, module.rsplit("/", 1)[-1]).rename(target)
    return target
