"""Spans of a store's long phases (restore, rebuild, snapshot) for OpenTelemetry: made when
the `otel` extra is installed, through whatever tracer provider the application set (none
set: OpenTelemetry's own no-op); nothing at all without the extra."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

try:
    from opentelemetry import propagate, trace
except ImportError:  # the `otel` extra is not installed
    trace = None  # type: ignore[assignment]

__all__ = ["Phase", "phase"]

_TRACER = "globalstore"


class Phase:
    """One phase's span, started now and ended once by end()."""

    def __init__(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        carrier: Mapping[str, str] | None = None,
    ) -> None:
        """`carrier`: the headers of an HTTP request this phase answers; the span is then a
        server span, a child of the caller's (W3C traceparent) if it sent one."""
        self._span: Any = None
        if trace is None:
            return
        tracer, attributes = trace.get_tracer(_TRACER), attributes or {}
        if carrier is None:
            self._span = tracer.start_span(name, attributes=attributes)
        else:
            context = propagate.extract(carrier)
            kind = trace.SpanKind.SERVER
            self._span = tracer.start_span(name, context, kind, attributes=attributes)

    def end(
        self, error: BaseException | None = None, attributes: Mapping[str, Any] | None = None
    ) -> None:
        """End the span with `attributes` more, failed with `error` if given; once."""
        span, self._span = self._span, None
        if span is None:
            return
        span.set_attributes(attributes or {})
        if error is not None:
            span.record_exception(error)
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
        span.end()


@contextlib.contextmanager
def phase(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    carrier: Mapping[str, str] | None = None,
) -> Iterator[Phase]:
    """A span over the block, failed with the error that leaves it, if one does."""
    span = Phase(name, attributes, carrier)
    try:
        yield span
    except BaseException as exc:
        span.end(exc)
        raise
    span.end()
