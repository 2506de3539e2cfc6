"""Failures in one line: a Spark job's root cause, the broker refusing the credentials, a
client refusing its settings; never a secret (no Spark, no broker: Java exceptions faked)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from globalstore.errors import AuthenticationError, BrokerUnavailable
from pipelines import topics
from pipelines.failures import PipelineFailed, explain, in_one_line
from tests.scram_settings import AUTH_MESSAGE, SECRET, SETTINGS

PLAN = "=== Streaming Query ===\nIdentifier: orders\nCurrent Logical Plan:\nWriteToMicroBatch"


@dataclass
class _Class:
    name: str

    def getName(self) -> str:  # noqa: N802 - Java's name
        return self.name


@dataclass
class FakeThrowable:
    """What py4j hands over for a Java exception: class, message, cause."""

    name: str
    message: str | None
    cause: FakeThrowable | None = None

    def getClass(self) -> _Class:  # noqa: N802 - Java's name
        return _Class(self.name)

    def getMessage(self) -> str | None:  # noqa: N802 - Java's name
        return self.message

    def getCause(self) -> FakeThrowable | None:  # noqa: N802 - Java's name
        return self.cause


class CapturedError(Exception):
    """pyspark's CapturedException: the Java exception is its `_origin`."""

    def __init__(self, origin: Any) -> None:
        super().__init__(f"[STREAM_FAILED] {PLAN}\n\tat org.apache.spark.Foo(Foo.scala:1)")
        self._origin = origin


def failed_query(root: FakeThrowable) -> CapturedError:
    stage = FakeThrowable("org.apache.spark.SparkException", f"Job aborted.\n{PLAN}", root)
    return CapturedError(FakeThrowable("org.apache.spark.sql.streaming.X", PLAN, stage))


def one_line(error: Exception | None) -> str:
    assert error is not None, "not recognised as a Spark failure"
    text = str(error)
    assert "\n" not in text and SECRET not in text and "Streaming Query" not in text
    assert "at org.apache" not in text
    return text


def test_a_java_client_refusing_the_password_is_an_authentication_error() -> None:
    root = FakeThrowable(
        "java.util.concurrent.ExecutionException",
        "wrapped",
        FakeThrowable("org.apache.kafka.common.errors.SaslAuthenticationException", AUTH_MESSAGE),
    )
    error = explain(failed_query(root), "b:9093", SETTINGS)
    assert isinstance(error, AuthenticationError)
    text = one_line(error)
    assert text.startswith("authentication failed at b:9093 (SASL SCRAM-SHA-512 as user 'app'")
    assert AUTH_MESSAGE in text


def test_the_root_cause_is_named_with_its_class_and_first_line() -> None:
    root = FakeThrowable("org.example.BoomException", f"it broke at {SECRET}\nmore detail")
    error = explain(failed_query(root), "b:9093", SETTINGS)
    assert isinstance(error, PipelineFailed)
    assert one_line(error) == "the Spark job failed: BoomException: it broke at ********"


def test_a_missing_topic_says_topic_not_found() -> None:
    root = FakeThrowable(
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException",
        "This server does not host this topic-partition.",
    )
    error = explain(failed_query(root), "b:9093", SETTINGS)
    assert one_line(error).startswith("topic not found at b:9093")


def test_a_python_workers_traceback_is_its_last_line() -> None:
    trace = (
        "\n  An exception was thrown from the Python worker.\nTraceback (most recent call "
        'last):\n  File "x.py", line 1, in f\nValueError: bad value'
    )
    root = FakeThrowable("org.apache.spark.api.python.PythonException", trace)
    error = explain(failed_query(root), "b:9093", SETTINGS)
    assert one_line(error) == "the Spark job failed: ValueError: bad value"


def test_a_python_error_is_left_alone_for_its_traceback() -> None:
    assert explain(KeyError("x"), "b:9093", SETTINGS) is None
    with pytest.raises(KeyError), in_one_line("b:9093", SETTINGS):
        raise KeyError("x")
    with pytest.raises(PipelineFailed) as info, in_one_line("b:9093", SETTINGS):
        raise failed_query(FakeThrowable("org.example.E", None))
    assert str(info.value) == "the Spark job failed: E"
    assert isinstance(info.value.__cause__, CapturedError)  # -v shows all of it


def test_no_broker_answering_is_one_line_once_the_time_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics, "ADMIN_TIMEOUT_S", 1.5)
    monkeypatch.setattr(topics, "_FIRST_METADATA_WAIT_S", 0.2)
    with pytest.raises(BrokerUnavailable) as info:
        topics.Admin("127.0.0.1:1", SETTINGS).topics()
    assert one_line(info.value).startswith("no Kafka broker answered at 127.0.0.1:1 within 2 s")
