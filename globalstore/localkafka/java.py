"""Find a Java runtime and check that it is new enough for Kafka 4 (Java 17+)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from globalstore.localkafka.errors import JavaError

__all__ = ["MINIMUM_JAVA", "check_java", "java_executable", "parse_java_major"]

MINIMUM_JAVA = 17
_VERSION_PATTERN = re.compile(r'version "(\d+)(?:\.(\d+))?')


def java_executable() -> str:
    """The `java` to run: $JAVA_HOME/bin/java when JAVA_HOME is set, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise JavaError(
            f"no Java runtime found: install Java {MINIMUM_JAVA}+ (e.g. `apt-get install "
            f"openjdk-{MINIMUM_JAVA}-jre-headless`) or set JAVA_HOME"
        )
    return found


def parse_java_major(version_output: str) -> int:
    """Major version from `java -version` output ("1.8.0_392" → 8, "17.0.15" → 17)."""
    match = _VERSION_PATTERN.search(version_output)
    if match is None:
        raise JavaError(f"cannot read the Java version from: {version_output.strip()[:200]!r}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> str:
    """Return the java executable after checking its version, or raise JavaError naming the fix."""
    java = java_executable()
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaError(f"cannot run {java}: {exc}") from exc
    major = parse_java_major(result.stderr + result.stdout)
    if major < MINIMUM_JAVA:
        raise JavaError(
            f"{java} is Java {major}; Kafka 4 needs Java {MINIMUM_JAVA}+. Install a newer JDK "
            "and put it first on PATH, or set JAVA_HOME to it."
        )
    return java
