"""The few calls of the Confluent Schema Registry API the pipelines make, over plain HTTP.

A run over Avro looks its reader schemas up once, when it starts: every version of the
subject `<raw topic>-value` (Confluent's default TopicNameStrategy), so records written
with any of them decode; a record naming an id the run does not know makes it look them up again
(pipelines/skeleton.py). `pipeline generate --format avro` and `pipeline register-schema`
register schemas there; the registry checks each new version against the subject's
compatibility rule and refuses one that breaks it (409), which is then one line here.
Any registry that speaks this API works: Confluent's, Karapace, Apicurio's ccompat API
(its URL ends in /apis/ccompat/v7).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from globalstore.errors import FatalError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
TIMEOUT_S = 30.0
_CONFLICT = 409  # the Confluent API's answer to a schema incompatible with the subject's


class SchemaRegistryError(FatalError):
    """The schema registry could not be reached or refused a call; one line, with the URL."""


def subject_of(topic: str) -> str:
    """The subject of a topic's record values under the TopicNameStrategy."""
    return f"{topic}-value"


def subject_schemas(url: str, subject: str) -> dict[int, str]:
    """{schema id: Avro schema text} of every version of `subject`."""
    versions = _call(url, f"/subjects/{_quoted(subject)}/versions")
    schemas = {}
    for version in versions:
        found = _call(url, f"/subjects/{_quoted(subject)}/versions/{int(version)}")
        if found.get("schemaType", "AVRO") != "AVRO":  # the registry leaves it out for Avro
            raise SchemaRegistryError(
                f"{subject} version {version} in the schema registry at {url} is a "
                f"{found['schemaType']} schema, not Avro"
            )
        schemas[int(found["id"])] = str(found["schema"])
    return schemas


def register(url: str, subject: str, schema: str) -> int:
    """Register `schema` under `subject` (a no-op if it is there already); its id."""
    body = json.dumps({"schema": schema}).encode()
    return int(_call(url, f"/subjects/{_quoted(subject)}/versions", body, "POST")["id"])


def set_compatibility(url: str, subject: str, level: str) -> None:
    """The rule the registry checks a new version of `subject` against (BACKWARD, FULL...)."""
    body = json.dumps({"compatibility": level}).encode()
    _call(url, f"/config/{_quoted(subject)}", body, "PUT")


def _quoted(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _call(url: str, path: str, body: bytes | None = None, method: str = "GET") -> Any:
    request = urllib.request.Request(
        url.rstrip("/") + path,
        data=body,
        headers={"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == _CONFLICT:
            raise SchemaRegistryError(
                f"the schema registry at {url} refused the schema as incompatible with the "
                f"subject's earlier versions (409 to {request.method} {path}): {_message(exc)}"
            ) from None
        raise SchemaRegistryError(
            f"the schema registry at {url} answered {exc.code} to {request.method} {path}: "
            f"{_message(exc)}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SchemaRegistryError(f"no schema registry answered at {url}: {reason}") from None


def _message(exc: urllib.error.HTTPError) -> str:
    """The registry's own words: its error body is {"error_code": ..., "message": ...}."""
    text = exc.read().decode(errors="replace")
    try:
        return str(json.loads(text)["message"])
    except (ValueError, KeyError, TypeError):
        return text.strip()[:200] or str(exc.reason)
