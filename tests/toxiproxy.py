"""Toxiproxy, a real fault injector, for the network-fault tests: its server built once with
`go install` from the Go module proxy and cached beside Kafka's jars, started on a loopback
port, and driven through its HTTP API.

A proxy listens on a loopback port and forwards each connection to its upstream; a toxic
on it delays, throttles or swallows what passes, in one direction ("upstream": client to
server, "downstream": server to client), while both ends keep their connections open.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.go_tools import go_binary
from tests.ports import on_a_free_port, wait_until_answering

VERSION = "v2.5.0"
MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
BOTH_WAYS = ("upstream", "downstream")


class Toxiproxy:
    """A running Toxiproxy server's API: proxies, toxics, and turning a proxy off."""

    def __init__(self, api: str) -> None:
        self.api = api

    def proxy(self, name: str, upstream: str, port: int = 0) -> str:
        """A new proxy to `upstream` on loopback `port` (0: one it picks); its address."""
        body = {"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream}
        return str(self._call("POST", "/proxies", body)["listen"])

    def cut(self, name: str) -> None:
        """A partition: from now on nothing passes either way, and no connection closes
        (the `timeout` toxic with no timeout, on both streams); new connections are taken,
        then hang the same way."""
        for stream in BOTH_WAYS:
            self.toxic(name, f"cut-{stream}", "timeout", stream, timeout=0)

    def hang(self, name: str) -> None:
        """A partition that holds what is sent instead of dropping it: nothing passes either
        way for ten minutes, not even a close (`cut` swallows the bytes, so a server's send
        completes and its close reaches the client, which then sees the stream end at once);
        the sender's writes block once the socket buffers are full."""
        for stream in BOTH_WAYS:
            self.toxic(name, f"hang-{stream}", "latency", stream, latency=600_000)

    def heal(self, name: str) -> None:
        """Remove every toxic of proxy `name`."""
        for toxic in self._call("GET", f"/proxies/{name}/toxics"):
            self._call("DELETE", f"/proxies/{name}/toxics/{toxic['name']}")

    def toxic(self, proxy: str, name: str, kind: str, stream: str, **attributes: int) -> None:
        body = {"name": name, "type": kind, "stream": stream, "attributes": attributes}
        self._call("POST", f"/proxies/{proxy}/toxics", body)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.api + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
        return json.loads(text) if text else None


@contextlib.contextmanager
def running_toxiproxy(log_file: Path) -> Iterator[Toxiproxy]:
    """A Toxiproxy server on a free loopback port, its log in `log_file`; stopped at exit."""
    binary = go_binary(MODULE, VERSION, "toxiproxy-server")

    def start(port: int) -> tuple[subprocess.Popen[bytes], Toxiproxy]:
        with log_file.open("ab") as log:
            process = subprocess.Popen(
                [str(binary), "-host", "127.0.0.1", "-port", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        client = Toxiproxy(f"http://127.0.0.1:{port}")

        def answers() -> bool:
            with contextlib.suppress(urllib.error.URLError, ConnectionError):
                client._call("GET", "/proxies")
                return True
            return False

        wait_until_answering(process, answers, log_file, "toxiproxy", 20)
        return process, client

    process, client = on_a_free_port(start)
    try:
        yield client
    finally:
        process.terminate()
        process.wait(10)
