"""One error root for the dev broker: whatever goes wrong starting it, the fix is the user's.

LocalKafkaError           the local broker could not be set up, started or stopped
├── JavaError             no usable Java runtime (missing, or older than Kafka needs)
├── JarResolutionError    Kafka's jars could not be resolved (offline on first use)
├── PortInUseError        the client or controller port is taken
└── BrokerExitedError     the JVM exited during start; the message carries its log tail
"""

from __future__ import annotations

__all__ = [
    "BrokerExitedError",
    "JarResolutionError",
    "JavaError",
    "LocalKafkaError",
    "PortInUseError",
]


class LocalKafkaError(RuntimeError):
    """The local broker could not be set up, started or stopped; the message names the fix."""


class JavaError(LocalKafkaError):
    """No usable Java runtime: missing, or older than Kafka needs."""


class JarResolutionError(LocalKafkaError):
    """Kafka's jars could not be resolved (typically: offline on first use)."""


class PortInUseError(LocalKafkaError):
    """A port the broker needs is taken by another process."""


class BrokerExitedError(LocalKafkaError):
    """The broker JVM exited before it became ready."""
