"""Kafka client settings for Spark's Java clients, translated from librdkafka's names.

The pipelines take client settings in one spelling, librdkafka's (DESIGN contract 6), and
give them to two kinds of client: librdkafka ones (the admin client that creates topics,
the sample-event producer) and Spark's Kafka source and sink, which are Java clients with
their own names for credentials and TLS material:

    librdkafka                                   Java
    security.protocol, sasl.mechanism, ...       the same (SHARED)
    sasl.mechanisms                              sasl.mechanism
    sasl.username + sasl.password                sasl.jaas.config (PLAIN or SCRAM login module)
    ssl.ca.location / ssl.ca.pem                 ssl.truststore.type=PEM + .certificates
    ssl.certificate.location / .pem              ssl.keystore.type=PEM + .certificate.chain
    ssl.key.location / ssl.key.pem               ssl.keystore.key
    ssl.endpoint.identification.algorithm=none   ssl.endpoint.identification.algorithm=""

A Java setting given as it is (sasl.jaas.config, ssl.truststore.*, ssl.keystore.*,
default.api.timeout.ms) replaces the translation of its family and never reaches
librdkafka (`librdkafka_settings`). Any other name is refused, naming it: silently
dropping a setting is how a client ends up talking plaintext to a port that expects TLS.

The source and sink get short timeouts unless the user gives their own (`FAILOVER`): the
admin client behind the Kafka source otherwise waits a minute on a killed leader.

Pure, except that PEM files are read here, at the driver: see `_pem`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from globalstore.errors import ConfigurationError

# Same name, same meaning, same values in both clients. Short on purpose: anything else
# must be looked at before it is added (librdkafka's ssl.cipher.suites, for one, takes
# OpenSSL's names and Java its own).
SHARED = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "client.id",
        "ssl.key.password",
        "request.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "retry.backoff.ms",
        "metadata.max.age.ms",
    }
)
ALIASES = {"sasl.mechanisms": "sasl.mechanism"}  # librdkafka's older spelling

JAAS = "sasl.jaas.config"
TRUSTSTORE = "ssl.truststore."
KEYSTORE = "ssl.keystore."
API_TIMEOUT = "default.api.timeout.ms"
JAVA_FAMILIES = (JAAS, TRUSTSTORE, KEYSTORE, API_TIMEOUT)
"""The Java settings a user may give as they are, each a family of names (a prefix)."""

REQUEST_TIMEOUT = "request.timeout.ms"
FAILOVER = {REQUEST_TIMEOUT: 5000, API_TIMEOUT: 5000}
"""The Java clients' timeouts (ms) unless given. After a partition leader dies, the source's
admin client asks the dead node for offsets until default.api.timeout.ms (Java's default:
60 s), then Spark retries with a new client, which finds the new leader. The admin client
requires default.api.timeout.ms >= request.timeout.ms, so a larger request timeout given
alone raises the API timeout with it."""

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

SECRET_OPTIONS_REGEX = (
    r"(?i)url|secret|password|passphrase|token|credential|jaas|keystore[.]key|[.]pem"
    r"|oauthbearer[.]config|certificate[.]chain|truststore[.]certificates"
)
"""Data-source option names whose values Spark must redact in plans and its UI: Spark's own
default (`url`), spark.redaction.regex's words (which redact the JAAS line by its value),
and the names whose values say nothing (a PEM key has no "password" in it)."""

ReadFile = Callable[[str], str]
_ENDPOINT = "ssl.endpoint.identification.algorithm"


@dataclass(frozen=True)
class _Family:
    """A group of librdkafka settings that becomes a family of Java settings."""

    reads: tuple[str, ...]
    writes: str  # the Java family: one the user gives explicitly replaces the translation
    translate: Callable[[Mapping[str, str], ReadFile], dict[str, str]]


def is_java_only(name: str) -> bool:
    """True for a setting only Java clients know (librdkafka would refuse it)."""
    return name.startswith(JAVA_FAMILIES)


def librdkafka_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The settings for a librdkafka client: all but the Java-only ones, which it refuses."""
    return {name: value for name, value in settings.items() if not is_java_only(name)}


def java_settings(settings: Mapping[str, str], read: ReadFile | None = None) -> dict[str, str]:
    """The Java clients' settings for librdkafka-named `settings`; ConfigurationError naming
    a setting that has no translation (`read` reads a PEM file; tests may pass their own)."""
    canonical = {ALIASES.get(name, name): value for name, value in settings.items()}
    explicit = {name: value for name, value in canonical.items() if is_java_only(name)}
    _refuse_untranslatable(canonical.keys() - explicit.keys())
    java = {name: canonical[name] for name in SHARED & canonical.keys()}
    for family in _FAMILIES:
        if not any(name.startswith(family.writes) for name in explicit):
            java.update(family.translate(canonical, read or _read_text))
    return {**java, **explicit}


def spark_kafka_options(
    settings: Mapping[str, str], bootstrap_servers: str, read: ReadFile | None = None
) -> dict[str, str]:
    """The Kafka source's and sink's options: `kafka.` + each Java client setting."""
    java = java_settings(settings, read)
    java = {**java, **_timeouts(java), "bootstrap.servers": bootstrap_servers}
    return {f"kafka.{name}": value for name, value in java.items()}


def _timeouts(java: Mapping[str, str]) -> dict[str, str]:
    """request.timeout.ms and default.api.timeout.ms: the given ones, else `FAILOVER`'s."""
    try:
        request = int(java.get(REQUEST_TIMEOUT, FAILOVER[REQUEST_TIMEOUT]))
        api = int(java.get(API_TIMEOUT, max(request, FAILOVER[API_TIMEOUT])))
    except ValueError as exc:
        raise ConfigurationError(f"a Kafka client timeout is not a whole number: {exc}") from None
    if api < request:
        raise ConfigurationError(
            f"{API_TIMEOUT} ({api}) must be at least {REQUEST_TIMEOUT} ({request}): "
            "Java's admin client refuses a smaller one"
        )
    return {REQUEST_TIMEOUT: str(request), API_TIMEOUT: str(api)}


def _refuse_untranslatable(names: set[str]) -> None:
    translated = {name for family in _FAMILIES for name in family.reads}
    unknown = sorted(names - SHARED - translated - {"bootstrap.servers"})
    if unknown:
        named = ", ".join(repr(name) for name in unknown)
        raise ConfigurationError(
            f"Kafka client setting {named} has no translation for Spark's Java Kafka clients "
            '(docs/pipelines.md, "Kafka client settings", lists those that have); a Java '
            f"setting may be given as it is: {JAAS}, {TRUSTSTORE}*, {KEYSTORE}*"
        )


def _jaas(settings: Mapping[str, str], _read: ReadFile) -> dict[str, str]:
    """sasl.jaas.config from sasl.username and sasl.password, for PLAIN and SCRAM."""
    username, password = settings.get("sasl.username"), settings.get("sasl.password")
    mechanism = settings.get("sasl.mechanism", "GSSAPI").upper()
    uses_sasl = settings.get("security.protocol", "").upper().startswith("SASL")
    if username is None and password is None and not (uses_sasl and mechanism in LOGIN_MODULES):
        return {}
    if mechanism not in LOGIN_MODULES:
        raise ConfigurationError(
            f"sasl.username/sasl.password translate for Spark's Java Kafka clients only with "
            f"sasl.mechanism {', '.join(LOGIN_MODULES)} (got {mechanism}); give {JAAS} as well"
        )
    if username is None or password is None:
        raise ConfigurationError(
            f"sasl.mechanism {mechanism} needs sasl.username and sasl.password (or {JAAS})"
        )
    entry = f"{LOGIN_MODULES[mechanism]} required username={_quoted(username)}"
    return {JAAS: f"{entry} password={_quoted(password)};"}


def _quoted(value: str) -> str:
    """A JAAS option value: Kafka parses it with Java's StreamTokenizer, which reads a quoted
    string up to the line's end and turns backslash sequences (\\n, \\123, ...) into
    characters, so a backslash, a quote and a line break are each escaped."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"}
    return '"' + "".join(escapes.get(char, char) for char in value) + '"'


def _truststore(settings: Mapping[str, str], read: ReadFile) -> dict[str, str]:
    if settings.get("ssl.ca.location") == "probe":
        return {}  # librdkafka's system CA store; the Java clients' default is the JDK's own
    ca = _pem(settings, "ssl.ca", read)
    return {} if ca is None else {f"{TRUSTSTORE}type": "PEM", f"{TRUSTSTORE}certificates": ca}


def _keystore(settings: Mapping[str, str], read: ReadFile) -> dict[str, str]:
    """mTLS: the client's certificate and key as a PEM keystore."""
    certificate, key = _pem(settings, "ssl.certificate", read), _pem(settings, "ssl.key", read)
    if certificate is None and key is None:
        return {}
    if certificate is None or key is None:
        raise ConfigurationError(
            "a client certificate needs both ssl.certificate.location and ssl.key.location "
            "(or their .pem forms)"
        )
    if re.search(r"-----BEGIN (RSA|EC|DSA) PRIVATE KEY-----", key):
        raise ConfigurationError(
            "the ssl.key is in PKCS#1 form, which Java's Kafka clients cannot read: convert "
            "it with `openssl pkcs8 -topk8 -in KEY -out KEY.p8` (-nocrypt for no password)"
        )
    return {
        f"{KEYSTORE}type": "PEM",
        f"{KEYSTORE}certificate.chain": certificate,
        f"{KEYSTORE}key": key,
    }


def _endpoint_identification(settings: Mapping[str, str], _read: ReadFile) -> dict[str, str]:
    if _ENDPOINT not in settings:
        return {}
    value = settings[_ENDPOINT]
    return {_ENDPOINT: "" if value.lower() == "none" else value}  # Java turns it off with ""


def _pem(settings: Mapping[str, str], prefix: str, read: ReadFile) -> str | None:
    """The PEM text of `prefix`.pem, or of the file `prefix`.location.

    The text, not the path, goes to the Java clients: Spark runs them on the executors,
    which on a cluster have none of the driver's files, and a PEM store given as text needs
    no file there (nor a --files that puts it at the same path on every node)."""
    if f"{prefix}.pem" in settings:
        return settings[f"{prefix}.pem"]
    location = settings.get(f"{prefix}.location")
    if location is None:
        return None
    try:
        return read(location)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read {prefix}.location {location}: {exc}") from None


def _read_text(path: str) -> str:
    return Path(path).read_text()


_FAMILIES = (
    _Family(("sasl.username", "sasl.password"), JAAS, _jaas),
    _Family(("ssl.ca.location", "ssl.ca.pem"), TRUSTSTORE, _truststore),
    _Family(
        ("ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem"),
        KEYSTORE,
        _keystore,
    ),
    _Family((_ENDPOINT,), _ENDPOINT, _endpoint_identification),
)
