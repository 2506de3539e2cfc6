"""The loopback ports the dev broker listens on: free or taken, picked free, a lost race."""

from __future__ import annotations

import socket

from globalstore.localkafka.errors import LocalKafkaError

__all__ = ["HOST", "free_port", "lost_port_race", "port_is_free"]

HOST = "127.0.0.1"
# What a JVM whose listener port was taken after the check writes before it exits.
_BIND_FAILURES = ("java.net.BindException", "Address already in use")


def port_is_free(port: int) -> bool:
    """True if nothing listens on `port` of the loopback address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(span: int = 2) -> int:
    """A port that is free now, with its `span - 1` successors free too: by default the
    client port and the controller's; a cluster of N nodes needs a block of 2N."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((HOST, 0))
            port = int(probe.getsockname()[1])
        if port + span - 1 <= 65535 and all(port_is_free(port + i) for i in range(1, span)):
            return port
    raise LocalKafkaError(f"could not find {span} consecutive free ports")


def lost_port_race(log: str) -> bool:
    """Whether a broker's log says it could not bind its listener port."""
    return any(marker in log for marker in _BIND_FAILURES)
