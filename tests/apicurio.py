"""Apicurio Registry, a real schema registry, for the pipeline tests that use one.

Its self-contained archive (a Quarkus app) is downloaded once from Maven Central and
unpacked into the cache beside Kafka's jars; each test session starts one on loopback
ports and stops it at the end. The pipelines speak the Confluent API, which Apicurio
serves at /apis/ccompat/v7. It needs Java 21 or newer (its classes are version 65); the
Java that runs Kafka may be older, so a new enough one is looked for among the installed
runtimes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from globalstore.localkafka import free_port
from globalstore.localkafka.errors import JavaError
from globalstore.localkafka.jars import cache_root, maven_repo
from globalstore.localkafka.java import parse_java_major
from tests.ports import on_a_free_port, wait_until_answering

VERSION = "3.3.3"
MINIMUM_JAVA = 21
CCOMPAT_PATH = "/apis/ccompat/v7"
_ARCHIVE = f"apicurio-registry-app-{VERSION}-all.tar.gz"
_DOWNLOAD_ATTEMPTS = 3
_START_TIMEOUT_S = 120.0
# Where Debian and Ubuntu install JDKs side by side (Temurin's packages included).
_JVM_DIRECTORY = Path("/usr/lib/jvm")


def java_at_least(minimum: int = MINIMUM_JAVA) -> str | None:
    """A `java` of version `minimum` or newer: $JAVA_HOME's, the one on PATH, or one of the
    JDKs installed side by side; None when there is none."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"], "bin", "java"))
    if shutil.which("java"):
        candidates.append(Path(str(shutil.which("java"))))
    candidates += sorted(_JVM_DIRECTORY.glob("*/bin/java"))
    for java in candidates:
        if java.exists() and _major(java) >= minimum:
            return str(java)
    return None


def _major(java: Path) -> int:
    try:
        result = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
        return parse_java_major(result.stderr + result.stdout)
    except (OSError, subprocess.TimeoutExpired, JavaError):
        return 0


def app_directory(cache_dir: Path | None = None) -> Path:
    """The unpacked app (quarkus-run.jar and its lib/), downloaded and unpacked on first
    use; unpacked in a scratch directory renamed at the end, so an interrupted start never
    leaves a directory that looks usable."""
    base = (cache_dir or cache_root()) / "apicurio" / VERSION
    target = base / "app"
    if (target / "quarkus-run.jar").exists():
        return target
    archive = base / _ARCHIVE
    if not archive.exists():
        _download(_archive_url(), archive)
    scratch = Path(tempfile.mkdtemp(prefix="unpack-", dir=base))
    try:
        with tarfile.open(archive) as packed:  # the app's files at the archive's top
            packed.extractall(scratch, filter="data")
        if not (scratch / "quarkus-run.jar").exists():
            raise RuntimeError(f"{archive} holds no quarkus-run.jar at its top")
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _archive_url() -> str:
    group = "io/apicurio/apicurio-registry-app"
    return f"{maven_repo()}/{group}/{VERSION}/{_ARCHIVE}"


def _download(url: str, target: Path) -> None:
    """Maven Central sometimes drops a connection: a few attempts before giving up."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    for attempt in range(1, _DOWNLOAD_ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(url, timeout=120) as response, partial.open("wb") as out:
                shutil.copyfileobj(response, out)
            partial.rename(target)
            return
        except (urllib.error.URLError, OSError) as exc:
            if attempt == _DOWNLOAD_ATTEMPTS:
                raise RuntimeError(f"cannot download Apicurio Registry from {url}: {exc}") from exc
            time.sleep(2 * attempt)


@contextlib.contextmanager
def running_apicurio(java: str, log_file: Path) -> Iterator[str]:
    """An Apicurio Registry on free loopback ports (its API and its management interface,
    which would listen on every address on port 9000 by default), its in-memory storage
    gone when it stops; yields the URL of its Confluent-compatible API."""
    app = app_directory()

    def start(port: int) -> tuple[subprocess.Popen[bytes], str]:
        command = [
            java, "-Xmx384m", "-XX:TieredStopAtLevel=1",
            "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={port}",
            "-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={free_port()}",
            "-jar", str(app / "quarkus-run.jar"),
        ]  # fmt: skip
        with log_file.open("ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}{CCOMPAT_PATH}"

        def answers() -> bool:
            with (
                contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError),
                urllib.request.urlopen(url + "/subjects", timeout=5),
            ):
                return True
            return False

        wait_until_answering(process, answers, log_file, "Apicurio Registry", _START_TIMEOUT_S)
        return process, url

    process, url = on_a_free_port(start)
    try:
        yield url
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
