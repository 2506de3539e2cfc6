"""The schema registry client against a fake registry over real HTTP (no Spark, no broker)."""

from __future__ import annotations

import json
import socket

import pytest

from pipelines.schema_registry import SchemaRegistryError, register, subject_of, subject_schemas
from tests.pipelines.fake_registry import fake_registry

V1 = json.dumps({"type": "record", "name": "E", "fields": [{"name": "a", "type": "string"}]})
V2 = json.dumps({"type": "record", "name": "E", "fields": [{"name": "a", "type": "long"}]})


def test_every_version_of_the_subject_is_looked_up_once() -> None:
    with fake_registry() as registry:
        registry.add("other-value", V2)  # ids are global: the subject's ids are 2 and 1
        registry.add("orders.raw-value", V2)
        registry.add("orders.raw-value", V1)
        assert subject_schemas(registry.url, subject_of("orders.raw")) == {1: V2, 2: V1}
        assert registry.requests == [
            "GET /subjects/orders.raw-value/versions",
            "GET /subjects/orders.raw-value/versions/1",
            "GET /subjects/orders.raw-value/versions/2",
        ]


def test_register_gives_the_id_and_registering_again_the_same_one() -> None:
    with fake_registry() as registry:
        first = register(registry.url + "/", "t-value", V1)  # a trailing slash is fine
        assert register(registry.url, "t-value", V1) == first
        assert subject_schemas(registry.url, "t-value") == {first: V1}


def test_an_unknown_subject_is_one_line_with_the_registrys_words() -> None:
    with fake_registry() as registry, pytest.raises(SchemaRegistryError) as raised:
        subject_schemas(registry.url, "nosuch-value")
    message = str(raised.value)
    assert "\n" not in message
    assert "answered 404" in message and "Subject 'nosuch-value' not found." in message


def test_a_schema_of_another_type_is_refused() -> None:
    with fake_registry() as registry:
        registry.add("t-value", V1)
        original = registry.answer

        def protobuf(method: str, path: str, body: bytes):  # type: ignore[no-untyped-def]
            status, answer = original(method, path, body)
            return status, {**answer, "schemaType": "PROTOBUF"} if path.endswith("/1") else answer

        registry.answer = protobuf  # type: ignore[method-assign]
        with pytest.raises(SchemaRegistryError, match="is a PROTOBUF schema, not Avro"):
            subject_schemas(registry.url, "t-value")


def test_no_registry_at_the_url_is_one_line() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(SchemaRegistryError, match=f"no schema registry answered at .*:{port}"):
        subject_schemas(f"http://127.0.0.1:{port}", "t-value")


def test_a_refused_schema_is_one_line_that_says_incompatible() -> None:
    with fake_registry() as registry:
        registry.add("t-value", V1)

        def refuse(method: str, path: str, body: bytes):  # type: ignore[no-untyped-def]
            return 409, {"error_code": 409, "message": "Incompatible schema: a is now long"}

        registry.answer = refuse  # type: ignore[method-assign]
        with pytest.raises(SchemaRegistryError) as raised:
            register(registry.url, "t-value", V2)
    message = str(raised.value)
    assert "\n" not in message
    assert "refused the schema as incompatible" in message and "409" in message
    assert "Incompatible schema: a is now long" in message
