"""Property-based fuzzing of the HTTP API from its own OpenAPI document (schemathesis), against
a real server on a real store: no 5xx, responses match the document.

The one 5xx the API promises on good input — 503 "min_position not reached" when a generated
position lies beyond the topic's end — is allowed only with exactly that body."""

from __future__ import annotations

from pathlib import Path

import hypothesis
import schemathesis
from hypothesis import HealthCheck
from schemathesis.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from globalstore.server import ServerSettings
from tests.integration.serve_support import running_server, served_store, wait_ready
from tests.integration.store_support import produce

# A stream that never ends while the store runs (a fuzzed call would read it until the test's
# timeout): its events are checked by tests/integration/test_store_changes.py.
UNENDING = ("/v1/changes",)


def _no_server_error(response: schemathesis.Response, case: schemathesis.Case) -> None:
    if response.status_code < 500:
        return
    body = response.json() if "json" in response.headers.get("content-type", [""])[0] else {}
    promised = response.status_code == 503 and "min_position not reached" in body.get("error", "")
    assert promised, f"{case.method} {case.formatted_path} {case.query} -> {response.status_code}"


def test_api_fuzzed_from_its_openapi_document_never_fails(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"f{i}", {"i": i}) for i in range(50)] + [("é/ü", 1)])
    settings = ServerSettings(token="fuzz", max_wait=0.05)
    auth = {"Authorization": "Bearer fuzz"}
    with running_server(served_store(topic, kafka_bootstrap, tmp_path / "s"), settings) as client:
        wait_ready(client)
        base_url = str(client.base_url)
        schema = schemathesis.openapi.from_dict(client.get("/openapi.json", headers=auth).json())
        checked, skipped = 0, []
        for result in schema.get_all_operations():
            operation = result.ok()
            if operation.path in UNENDING:
                skipped.append(operation.path)
                continue

            @hypothesis.settings(
                max_examples=60,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @hypothesis.given(case=operation.as_strategy())
            def fuzz(case: schemathesis.Case) -> None:
                response = case.call(base_url=base_url, headers=auth)
                _no_server_error(response, case)
                case.validate_response(
                    response,
                    checks=[
                        status_code_conformance,
                        content_type_conformance,
                        response_schema_conformance,
                    ],
                    headers=auth,
                )

            fuzz()
            checked += 1
        assert checked == 11 and skipped == list(UNENDING), f"fuzzed {checked} operations"
