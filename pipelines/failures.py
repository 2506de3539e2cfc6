"""A failed Spark job in one line: the root cause Spark's exception wraps, never its query
plan or a stack trace.

Spark reports a failed streaming query as a StreamingQueryException whose message holds the
query's plan and offsets, with the cause several Java exceptions down (a SparkException of
the failed stage, an ExecutionException, then, say, the Kafka client's
SaslAuthenticationException). The user needs the last one: its class and message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from globalstore.errors import FatalError
from globalstore.kafka.clients import unauthenticated
from globalstore.kafka.settings import mask_text

_MAX_CAUSES = 20  # a cause chain is short; the bound only guards against a cycle
_TRACEBACK = "Traceback (most recent call last)"


class PipelineFailed(FatalError):  # noqa: N818 - reads as what happened
    """The Spark job failed; the message is its root cause, in one line."""


@contextlib.contextmanager
def in_one_line(bootstrap_servers: str, secrets: Mapping[str, str]) -> Iterator[None]:
    """Raise a Spark failure inside as its cause in one line (`explain`), the original
    chained to it for -v; anything else as it is."""
    try:
        yield
    except Exception as exc:
        explained = explain(exc, bootstrap_servers, secrets)
        if explained is None:
            raise
        raise explained from exc


def explain(
    exc: BaseException, bootstrap_servers: str, secrets: Mapping[str, str]
) -> FatalError | None:
    """The one-line error for `exc` raised by Spark, or None when it came from elsewhere
    (then it is a bug here, and its traceback is the report). `secrets`: the settings whose
    secret values the message must not show."""
    causes = list(_java_causes(exc))
    if not causes:
        return None
    refused = [cause for cause in causes if cause[0].endswith("AuthenticationException")]
    if refused:
        return unauthenticated(bootstrap_servers, secrets, _said(refused[0]))
    name, message = causes[-1]
    if name.endswith("UnknownTopicOrPartitionException"):
        return PipelineFailed(
            mask_text(f"topic not found at {bootstrap_servers}: {message}", secrets)
        )
    return PipelineFailed(mask_text(f"the Spark job failed: {_said(causes[-1])}", secrets))


def _said(cause: tuple[str, str]) -> str:
    """`SimpleName: first line`, or the last line of a Python worker's traceback."""
    name, message = cause
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return name.rsplit(".", 1)[-1]
    if any(line.startswith(_TRACEBACK) for line in lines):
        return lines[-1]  # Python's own `ValueError: ...`
    return f"{name.rsplit('.', 1)[-1]}: {lines[0]}"


def _java_causes(exc: BaseException) -> Iterator[tuple[str, str]]:
    """(Java class name, message) of the Java exception behind `exc` and each of its causes."""
    throwable = _java_throwable(exc)
    for _ in range(_MAX_CAUSES):
        if throwable is None:
            return
        yield throwable.getClass().getName(), throwable.getMessage() or ""
        throwable = throwable.getCause()


def _java_throwable(exc: BaseException | None) -> Any:
    """The Java exception of pyspark's CapturedException (`_origin`, or its `_cause`'s for
    the exceptions pyspark only describes) or of py4j's Py4JJavaError."""
    while exc is not None:
        origin = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
        if origin is not None:
            return origin
        exc = getattr(exc, "_cause", None) or exc.__cause__
    return None
