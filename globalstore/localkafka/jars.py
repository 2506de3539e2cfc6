"""Resolve Apache Kafka's own jars from Maven Central once, and cache them.

The resolver is Apache Ivy run as a plain `java -jar`: it reads Maven POMs, follows the
transitive runtime dependencies and copies the jars into one directory. The Ivy jar comes
from pyspark when it is installed (it ships one), otherwise it is fetched once from Maven
Central into the cache. So resolving needs Java and a network on first use, nothing else;
after that a start works offline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from globalstore.localkafka.errors import JarResolutionError
from globalstore.localkafka.java import java_executable

__all__ = [
    "DEFAULT_MAVEN_REPO",
    "IVY_VERSION",
    "LOG4J_VERSION",
    "ResolvedJars",
    "cache_root",
    "maven_repo",
    "maven_url",
    "resolve_kafka_jars",
]

DEFAULT_MAVEN_REPO = "https://repo1.maven.org/maven2"
IVY_VERSION = "2.5.3"
LOG4J_VERSION = "2.24.3"
_COMPLETE_MARKER = ".complete"
_RESOLVE_TIMEOUT_S = 900


@dataclass(frozen=True)
class ResolvedJars:
    """Apache Kafka's jars in the local cache, and the time resolving them took."""

    directory: Path
    seconds: float  # 0.0 when the cache already held them

    @property
    def classpath(self) -> str:
        """A Java classpath of every jar in the directory (a wildcard)."""
        return str(self.directory / "*")


def cache_root() -> Path:
    """The cache globalstore keeps downloads in (`$XDG_CACHE_HOME/globalstore`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "globalstore"


def resolve_kafka_jars(version: str, cache_dir: Path | None = None) -> ResolvedJars:
    """Return the directory holding Kafka `version`'s runtime classpath, resolving it if new."""
    lib_dir = (cache_dir or cache_root()) / "kafka" / version / "lib"
    if (lib_dir / _COMPLETE_MARKER).exists():
        return ResolvedJars(lib_dir, 0.0)
    began = time.monotonic()
    ivy_jar = _ivy_jar(cache_dir or cache_root())
    # Resolve into a scratch directory and rename at the end, so an interrupted resolve
    # never leaves a half-filled lib/ that looks usable.
    lib_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lib-", dir=lib_dir.parent))
    try:
        _run_ivy(ivy_jar, version, scratch, (cache_dir or cache_root()) / "ivy-cache")
        (scratch / _COMPLETE_MARKER).write_text(version + "\n")
        shutil.rmtree(lib_dir, ignore_errors=True)
        scratch.rename(lib_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ResolvedJars(lib_dir, time.monotonic() - began)


def _ivy_jar(cache_dir: Path) -> Path:
    bundled = _pyspark_ivy_jar()
    if bundled is not None:
        return bundled
    target = cache_dir / "ivy" / f"ivy-{IVY_VERSION}.jar"
    if not target.exists():
        _download(maven_url("org.apache.ivy", "ivy", IVY_VERSION), target)
    return target


def _pyspark_ivy_jar() -> Path | None:
    try:
        import pyspark  # noqa: PLC0415 - optional dependency, only to borrow its Ivy jar
    except ImportError:
        return None
    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("ivy-*.jar"))
    return jars[-1] if jars else None


def maven_repo() -> str:
    """Maven Central, or the mirror named by GLOBALSTORE_MAVEN_REPO (e.g. a company proxy)."""
    return os.environ.get("GLOBALSTORE_MAVEN_REPO", DEFAULT_MAVEN_REPO).rstrip("/")


def maven_url(group: str, artifact: str, version: str) -> str:
    """Where a jar lives in the Maven repository (Central, or the configured mirror)."""
    return f"{maven_repo()}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"


def _download(url: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError) as exc:
        raise JarResolutionError(
            f"cannot download {url}: {exc}. The first start needs Maven Central; "
            "connect once, or install pyspark (`pip install globalstore[spark]`), "
            "which ships the resolver jar."
        ) from exc
    partial.rename(target)


def _ivy_module(version: str) -> str:
    dependencies = [
        ("org.apache.kafka", "kafka_2.13", version),
        # Kafka 4 logs through SLF4J 2 and log4j2 but ships no binding in its POM.
        ("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
    ]
    lines = "\n".join(
        f'    <dependency org="{g}" name="{a}" rev="{v}" conf="default->runtime(*),master(*)"/>'
        for g, a, v in dependencies
    )
    return (
        '<ivy-module version="2.0">\n'
        '  <info organisation="globalstore" module="localkafka"/>\n'
        '  <configurations><conf name="default"/></configurations>\n'
        f"  <dependencies>\n{lines}\n  </dependencies>\n"
        "</ivy-module>\n"
    )


def _ivy_settings() -> str:
    return (
        "<ivysettings>\n"
        '  <settings defaultResolver="maven"/>\n'
        f'  <resolvers><ibiblio name="maven" m2compatible="true" root="{maven_repo()}/"/>'
        "</resolvers>\n"
        "</ivysettings>\n"
    )


def _run_ivy(ivy_jar: Path, version: str, lib_dir: Path, ivy_cache: Path) -> None:
    module_file = lib_dir / "ivy.xml"
    module_file.write_text(_ivy_module(version))
    settings_file = lib_dir / "ivysettings.xml"
    settings_file.write_text(_ivy_settings())
    command = [
        java_executable(), "-jar", str(ivy_jar),
        "-settings", str(settings_file),
        "-ivy", str(module_file),
        "-cache", str(ivy_cache),
        "-confs", "default",
        # Some of Kafka's dependencies are packaged as OSGi "bundle": accept both.
        "-types", "jar", "bundle",
        "-retrieve", str(lib_dir / "[artifact]-[revision](-[classifier]).[ext]"),
    ]  # fmt: skip
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_RESOLVE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise JarResolutionError(f"resolving Kafka {version} timed out") from exc
    module_file.unlink()
    settings_file.unlink()
    if result.returncode != 0 or not any(lib_dir.glob("kafka_2.13-*.jar")):
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise JarResolutionError(
            f"could not resolve Apache Kafka {version} from Maven Central "
            f"({maven_repo()}). On first use the jars must be downloaded: check the network "
            f"or proxy, or the version number. Resolver output:\n{tail}"
        )
