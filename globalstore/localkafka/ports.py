"""The local broker's ports: is one free, a free pair, and a start that lost its port."""

from __future__ import annotations

import socket

from globalstore.localkafka.errors import LocalKafkaError

HOST = "127.0.0.1"  # the address the local broker listens on
# What a JVM whose listener port was taken after the check writes before it exits.
_BIND_FAILURES = ("java.net.BindException", "Address already in use")


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port that is free now and whose successor is free too (the controller's)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((HOST, 0))
            port = int(probe.getsockname()[1])
        if port < 65535 and port_is_free(port + 1):
            return port
    raise LocalKafkaError("could not find two consecutive free ports")


def lost_port_race(log: str) -> bool:
    """Whether a broker's log says it could not bind its listener port."""
    return any(marker in log for marker in _BIND_FAILURES)
