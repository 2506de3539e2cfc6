"""The routes that report on the server and its store rather than read the store:
GET /v1/status, /healthz, /readyz, /metrics and the OpenAPI document."""

from __future__ import annotations

import dataclasses

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from globalstore.server import openapi
from globalstore.server.bodies import json_response
from globalstore.server.metrics import Metrics, stopped_by
from globalstore.server.served import ServedStore
from globalstore.server.settings import ServerSettings
from globalstore.status import State

__all__ = ["Reports"]


class Reports:
    """The handlers of the reporting routes, bound to one served store."""

    def __init__(self, served: ServedStore, settings: ServerSettings, metrics: Metrics) -> None:
        """The OpenAPI document is built once, from `settings`."""
        self.served = served
        self.metrics = metrics
        self._openapi = orjson.dumps(openapi.document(settings))

    async def status(self, request: Request) -> Response:
        """The store's status, its restore's progress, and why it never started if so."""
        status = self.served.store.status()
        report = dataclasses.asdict(status)
        progress = self.served.progress()
        report["restore"] = {**dataclasses.asdict(progress), "rate": progress.rate}
        error = self.served.error
        report["start_error"] = None if error is None else str(error)
        if error is not None and status.failure is None:  # it never started: say why, as
            report["state"] = State.FAILED  # /healthz does (the store itself says "closed")
            report["failure"] = stopped_by(self.served, status)
            report["last_error"] = f"{type(error).__name__}: {error}"
        return json_response(report)

    async def healthz(self, request: Request) -> Response:
        """503 once the store can no longer follow (it never started, or its thread stopped
        on an error): a restart is the way on. Open without a token, so it names the error's
        type only; its message (paths, brokers, user names) is in /v1/status."""
        failure = stopped_by(self.served, self.served.store.status())
        if failure is not None:
            return json_response({"status": "failed", "error": failure}, 503)
        return json_response({"status": "alive"})

    async def readyz(self, request: Request) -> Response:
        """200 while the store runs restored and, with a max_staleness, fresh; else 503 with
        its state, or "stale" and why."""
        status = self.served.store.status()
        if status.state is State.RUNNING and status.ready:
            return json_response({"status": "ready"})
        if status.stale is not None:
            return json_response({"status": "stale", "reason": status.stale}, 503)
        return json_response({"status": status.state}, 503)

    async def prometheus(self, request: Request) -> Response:
        """The metrics in Prometheus' text format."""
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi(self, request: Request) -> Response:
        """The OpenAPI document of this server's routes."""
        return Response(self._openapi, media_type="application/json")
