"""A fake of a schema registry: the few Confluent API calls pipelines/schema_registry.py
makes, over real HTTP on a free port, with the schemas in a dict. It fakes the registry for
the lookup client only (no compatibility checks, no auth); no real registry runs here.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeRegistry:
    def __init__(self) -> None:
        self.subjects: dict[str, list[int]] = {}  # subject -> schema id per version
        self.schemas: dict[int, str] = {}  # id -> schema text
        self.requests: list[str] = []  # "GET /path", in order
        self.url = ""

    def add(self, subject: str, schema: str) -> int:
        """Register `schema` (or find it) under `subject`; its id."""
        schema_id = next((i for i, s in self.schemas.items() if s == schema), None)
        if schema_id is None:
            schema_id = len(self.schemas) + 1
            self.schemas[schema_id] = schema
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        self.requests.append(f"{method} {path}")
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[0] != "subjects" or len(parts) < 3 or parts[2] != "versions":
            return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}
        subject = parts[1]
        if method == "POST" and len(parts) == 3:
            return 200, {"id": self.add(subject, json.loads(body)["schema"])}
        if subject not in self.subjects:
            return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
        versions = self.subjects[subject]
        if len(parts) == 3:
            return 200, list(range(1, len(versions) + 1))
        schema_id = versions[int(parts[3]) - 1]
        found = {"subject": subject, "version": int(parts[3]), "id": schema_id}
        return 200, {**found, "schema": self.schemas[schema_id]}


@contextmanager
def fake_registry() -> Iterator[FakeRegistry]:
    registry = FakeRegistry()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._reply(b"")

        def do_POST(self) -> None:
            self._reply(self.rfile.read(int(self.headers["Content-Length"])))

        def _reply(self, body: bytes) -> None:
            status, answer = registry.answer(self.command, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    registry.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
