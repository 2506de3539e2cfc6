"""Drive one compose project of compose/docker-compose.yml (and override files such as
compose/cluster.yml) from a test, and check that taking it down left nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

COMPOSE_FILE = Path(__file__).parents[2] / "compose" / "docker-compose.yml"
CLUSTER_FILE = COMPOSE_FILE.with_name("cluster.yml")  # three brokers, over COMPOSE_FILE
_PROJECT_LABEL = "com.docker.compose.project"


def compose_commands() -> list[list[str]]:
    """Every compose implementation on this machine: v2's plugin and 1.29's docker-compose."""
    found = []
    if _succeeds(["docker", "compose", "version"]):
        found.append(["docker", "compose"])
    if shutil.which("docker-compose") and _succeeds(["docker-compose", "version"]):
        found.append(["docker-compose"])
    return found


def _succeeds(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=30, check=False).returncode == 0
    except OSError:
        return False


class ComposeProject:
    def __init__(
        self,
        compose: list[str],
        name: str,
        env: Mapping[str, str],
        files: Sequence[Path] = (COMPOSE_FILE,),
    ) -> None:
        """`files`: the compose files, each merged over the ones before it (`-f` in order)."""
        self.compose = compose
        self.name = name
        self.env = dict(env)
        self.files = list(files)

    def run(self, *args: str, timeout: float = 300) -> str:
        given = [arg for path in self.files for arg in ("-f", str(path))]
        command = [*self.compose, *given, "-p", self.name, *args]
        result = subprocess.run(
            command,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
        return result.stdout

    def container_ids(self, service: str) -> list[str]:
        # Ordered by container number, so index 0 is instance 1.
        ids = self.run("ps", "-q", service).split()
        numbers = {
            cid: int(
                docker(
                    "inspect",
                    "-f",
                    '{{index .Config.Labels "com.docker.compose.container-number"}}',
                    cid,
                )
            )
            for cid in ids
        }
        return sorted(ids, key=numbers.__getitem__)

    def http_base(self, container: str, port: int) -> str:
        """http://127.0.0.1:N for a container's published port (which a restart may change)."""
        bindings = json.loads(docker("inspect", "-f", "{{json .NetworkSettings.Ports}}", container))
        host = bindings[f"{port}/tcp"][0]
        assert host["HostIp"] == "127.0.0.1", f"published beyond loopback: {host}"
        return f"http://127.0.0.1:{host['HostPort']}"

    def logs(self, *services: str, lines: int = 40) -> str:
        try:
            return self.run("logs", "--no-color", "--tail", str(lines), *services, timeout=60)
        except AssertionError as exc:
            return str(exc)

    def down(self) -> None:
        self.run("down", "--volumes", "--remove-orphans", "--timeout", "20", timeout=180)

    def leftovers(self) -> dict[str, list[str]]:
        """The project's containers, networks and volumes that still exist."""
        label = f"label={_PROJECT_LABEL}={self.name}"
        found = {
            "containers": docker("ps", "-a", "-q", "--filter", label).split(),
            "networks": docker("network", "ls", "-q", "--filter", label).split(),
            "volumes": docker("volume", "ls", "-q", "--filter", label).split(),
        }
        return {kind: names for kind, names in found.items() if names}


def docker(*args: str) -> str:
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.strip()


def get_json(url: str) -> tuple[int, Any]:
    """(status, parsed body); status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except (OSError, ValueError) as exc:
        return 0, str(exc)
