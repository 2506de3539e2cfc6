"""A Spark standalone cluster (one master, one worker) started from the pyspark installation.

Each daemon is its own JVM on loopback with a small heap, the way `sbin/start-master.sh`
and `start-worker.sh` run them, minus the daemonizing: the test owns the processes and
stops them. Every port is 0: each daemon binds one the system picks and logs it, and the
addresses are read from those lines, so no port is picked free and bound later.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from tests.waiting import eventually

SPARK_HOME = Path(pyspark.__file__).parent
HOST = "127.0.0.1"
START_TIMEOUT_S = 90.0
_MASTER_AT = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI_AT = re.compile(r"Bound MasterWebUI to \S+, and started at (http://\S+)")


@dataclass(frozen=True)
class Cluster:
    master_url: str
    master_ui: str
    work_dir: Path

    def state(self) -> dict[str, Any]:
        """The master's view (workers, running and completed applications)."""
        with urllib.request.urlopen(f"{self.master_ui}/json", timeout=10) as response:
            state: dict[str, Any] = json.load(response)
            return state


@contextmanager
def standalone_cluster(scratch: Path, env: Mapping[str, str]) -> Iterator[Cluster]:
    daemon_env = {
        **env,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_LOCAL_IP": HOST,  # the web UIs bind all interfaces unless told loopback
    }
    master_log = scratch / "master.log"
    master = _daemon(
        master_log,
        daemon_env,
        "org.apache.spark.deploy.master.Master",
        *("--host", HOST, "--port", "0", "--webui-port", "0"),
    )
    worker = None
    try:
        cluster = Cluster(
            _logged(master_log, _MASTER_AT, "master"),
            _logged(master_log, _MASTER_UI_AT, "master web UI"),
            scratch / "work",
        )
        eventually(lambda: bool(_try_state(cluster)), START_TIMEOUT_S, _text_of(master_log), 0.5)
        worker = _daemon(
            scratch / "worker.log",
            {**daemon_env, "SPARK_WORKER_DIR": str(cluster.work_dir)},
            "org.apache.spark.deploy.worker.Worker",
            *("--host", HOST, "--cores", "1", "--memory", "1g"),
            *("--webui-port", "0", cluster.master_url),
        )
        alive = lambda: _try_state(cluster).get("aliveworkers", 0) >= 1  # noqa: E731
        eventually(alive, START_TIMEOUT_S, _text_of(scratch / "worker.log"), 0.5)
        yield cluster
    finally:
        for process in (worker, master):
            if process is not None:
                process.terminate()
                process.wait(30)


def _logged(log: Path, line: re.Pattern[str], what: str) -> str:
    """The address a daemon logged it listens at (group 1 of `line`)."""
    text = _text_of(log)
    eventually(lambda: line.search(text()) is not None, START_TIMEOUT_S, text, 0.2)
    match = line.search(text())
    assert match is not None, f"Spark standalone {what}: no address in {log}"
    return match.group(1)


def _text_of(log: Path) -> Callable[[], str]:
    """What the daemon has logged so far (a daemon logs its addresses once, at the start)."""
    return lambda: log.read_text(errors="replace")


def _daemon(
    log: Path, env: Mapping[str, str], main_class: str, *args: str
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), main_class, *args],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _try_state(cluster: Cluster) -> dict[str, Any]:
    """The master's state, or {} while it is not up: no answer yet, or (seen on a loaded
    machine, in the instant before it is elected leader) its HTML page instead of JSON."""
    try:
        return cluster.state()
    except (OSError, ValueError):
        return {}


def without_project_env(scratch: Path, python: str, site_packages: str) -> dict[str, str]:
    """Environment whose Python sees the installed libraries but not this project.

    The project is installed in editable mode through a `.pth` hook; `python -S` skips
    site processing, and PYTHONPATH lists the site-packages directory itself, so pyspark,
    pandas and friends import while `pipelines` and `globalstore` do not - as on a worker
    that never saw the repository. Only what --py-files ships can provide them.
    """
    wrapper = scratch / "python-without-project"
    wrapper.write_text(f'#!/bin/sh\nexec "{python}" -S "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    return {**env, "PYSPARK_PYTHON": str(wrapper), "PYTHONPATH": site_packages}
