"""Client settings in librdkafka's names, translated for Spark's Java Kafka clients, and the
librdkafka side of them (no Spark, no broker)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from globalstore.errors import ConfigurationError
from globalstore.kafka.clients import LIBRDKAFKA_LOG, Refusals
from globalstore.kafka.settings import is_secret
from pipelines.clients import client_config
from pipelines.java_clients import (
    SECRET_OPTIONS_REGEX,
    SHARED,
    ReadFile,
    java_settings,
    librdkafka_settings,
    spark_kafka_options,
)

SECRET = 's3"cr\\et=pw'
SCRAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "app",
    "sasl.password": SECRET,
}
CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
PKCS1 = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n"
PEMS = {"ca.pem": CERT, "client.pem": CERT, "client.key": KEY, "rsa.key": PKCS1}


def read(path: str) -> str:
    """The PEM files of these tests, by name, without a disk."""
    return PEMS[path]


def refusal(settings: dict[str, str], reader: ReadFile | None = read) -> str:
    with pytest.raises(ConfigurationError) as info:
        java_settings(settings, reader)
    message = str(info.value)
    assert "\n" not in message and SECRET not in message
    return message


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_username_and_password_become_a_jaas_line(mechanism: str, module: str) -> None:
    settings = {**SCRAM, "sasl.mechanism": mechanism, "sasl.password": "pw"}
    assert java_settings(settings, read) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": f'{module} required username="app" password="pw";',
    }


def test_jaas_values_escape_quotes_backslashes_and_line_breaks() -> None:
    # Kafka reads the line with Java's StreamTokenizer: \" is a quote, \\ a backslash, \n a
    # line break (a raw one would end the string). Checked against kafka-clients 3.9's
    # JaasContext by hand; here the exact text.
    settings = {**SCRAM, "sasl.username": 'a"b', "sasl.password": 'p\\1"\nq\r'}
    jaas = java_settings(settings, read)["sasl.jaas.config"]
    assert jaas.endswith(r'required username="a\"b" password="p\\1\"\nq\r";')


def test_the_older_sasl_mechanisms_spelling_is_understood() -> None:
    settings = {**SCRAM, "sasl.mechanisms": "PLAIN"}
    del settings["sasl.mechanism"]
    java = java_settings(settings, read)
    assert java["sasl.mechanism"] == "PLAIN" and "PlainLoginModule" in java["sasl.jaas.config"]


def test_a_ca_file_becomes_a_pem_truststore_holding_the_certificates() -> None:
    java = java_settings({"security.protocol": "SSL", "ssl.ca.location": "ca.pem"}, read)
    assert java == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": CERT,  # the text: executors need no file
    }
    assert java_settings({"ssl.ca.pem": CERT}, read)["ssl.truststore.certificates"] == CERT
    assert java_settings({"ssl.ca.location": "probe"}, read) == {}  # the JDK's own CAs


def test_mtls_certificate_and_key_become_a_pem_keystore() -> None:
    settings = {
        "security.protocol": "SSL",
        "ssl.certificate.location": "client.pem",
        "ssl.key.location": "client.key",
        "ssl.key.password": SECRET,
    }
    assert java_settings(settings, read) == {
        "security.protocol": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": CERT,
        "ssl.keystore.key": KEY,
        "ssl.key.password": SECRET,  # the same name in both clients
    }


def test_pem_files_are_read_from_disk_by_default(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(CERT)
    assert java_settings({"ssl.ca.location": str(ca)})["ssl.truststore.certificates"] == CERT
    missing = refusal({"ssl.ca.location": str(tmp_path / "nope.pem")}, reader=None)
    assert "cannot read ssl.ca.location" in missing and "nope.pem" in missing


def test_a_key_without_certificate_or_in_pkcs1_form_is_refused() -> None:
    assert "needs both" in refusal({"ssl.key.location": "client.key"})
    pkcs1 = {"ssl.certificate.location": "client.pem", "ssl.key.location": "rsa.key"}
    assert "PKCS#1" in refusal(pkcs1) and "openssl pkcs8" in refusal(pkcs1)


@pytest.mark.parametrize(("librdkafka", "java"), [("none", ""), ("https", "https")])
def test_endpoint_identification_none_is_javas_empty_string(librdkafka: str, java: str) -> None:
    name = "ssl.endpoint.identification.algorithm"
    assert java_settings({name: librdkafka}, read) == {name: java}


def test_shared_names_pass_through_unchanged() -> None:
    settings = dict.fromkeys(SHARED, "7")
    assert java_settings(settings, read) == settings


def test_an_explicit_java_setting_wins_over_its_translation() -> None:
    jaas = 'org.example.Login required token="t";'
    truststore = {"ssl.truststore.location": "/etc/ts.jks", "ssl.truststore.password": "x"}
    keystore = {"ssl.keystore.location": "/etc/ks.p12", "ssl.keystore.type": "PKCS12"}
    settings = {
        **SCRAM,
        "ssl.ca.location": "ca.pem",
        "ssl.certificate.location": "client.pem",
        "ssl.key.location": "client.key",
        "sasl.jaas.config": jaas,
        **truststore,
        **keystore,
    }
    java = java_settings(settings, read)
    # A family given explicitly is taken whole: no PEM type mixed into a JKS truststore.
    assert java == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas,
        **truststore,
        **keystore,
    }


def test_the_librdkafka_side_drops_the_java_names() -> None:
    settings = {
        **SCRAM,
        "sasl.jaas.config": "x required;",
        "ssl.truststore.location": "/etc/ts.jks",
        "ssl.keystore.key": KEY,
    }
    assert librdkafka_settings(settings) == SCRAM
    refusals = Refusals("broker:9093", settings)
    config = client_config(refusals, {"linger.ms": 20, "sasl.username": "default"})
    assert config == {
        "linger.ms": 20,
        **SCRAM,  # the user's settings win over a client's defaults
        "bootstrap.servers": "broker:9093",
        "logger": LIBRDKAFKA_LOG,  # librdkafka's lines go through logging
        "error_cb": refusals,
    }


def test_a_setting_without_translation_is_refused_by_name() -> None:
    message = refusal({**SCRAM, "enable.ssl.certificate.verification": "false", "zz.x": "1"})
    assert "'enable.ssl.certificate.verification', 'zz.x' has no translation" in message
    assert "sasl.jaas.config" in message  # says what may be given instead


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"sasl.mechanism": "GSSAPI", "sasl.username": "app", "sasl.password": SECRET}, "GSSAPI"),
        ({**SCRAM, "sasl.password": None}, "needs sasl.username and sasl.password"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs sasl.username"),
    ],
)
def test_credentials_java_cannot_use_are_refused(settings: dict[str, str], said: str) -> None:
    settings = {name: value for name, value in settings.items() if value is not None}
    assert said in refusal(settings)


def test_spark_options_prefix_every_java_setting_and_set_the_bootstrap() -> None:
    options = spark_kafka_options({**SCRAM, "bootstrap.servers": "ignored:1"}, "b:9093", read)
    assert options["kafka.bootstrap.servers"] == "b:9093"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert set(options) == {
        "kafka.bootstrap.servers",
        "kafka.security.protocol",
        "kafka.sasl.mechanism",
        "kafka.sasl.jaas.config",
        "kafka.request.timeout.ms",
        "kafka.default.api.timeout.ms",
    }


@pytest.mark.parametrize(
    ("given", "request_ms", "api_ms"),
    [
        ({}, "5000", "5000"),  # failover within seconds, not Java's 60 s
        ({"request.timeout.ms": "30000"}, "30000", "30000"),  # the API timeout follows
        ({"default.api.timeout.ms": "20000"}, "5000", "20000"),
        ({"request.timeout.ms": "8000", "default.api.timeout.ms": "9000"}, "8000", "9000"),
    ],
)
def test_the_java_clients_get_short_timeouts_unless_given(
    given: dict[str, str], request_ms: str, api_ms: str
) -> None:
    options = spark_kafka_options(given, "b:1", read)
    assert options["kafka.request.timeout.ms"] == request_ms
    assert options["kafka.default.api.timeout.ms"] == api_ms
    assert librdkafka_settings(given).keys() == given.keys() - {"default.api.timeout.ms"}


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"request.timeout.ms": "9000", "default.api.timeout.ms": "3000"}, "at least"),
        ({"default.api.timeout.ms": "5s"}, "not a whole number"),
    ],
)
def test_timeouts_the_admin_client_would_refuse_are_refused(
    given: dict[str, str], said: str
) -> None:
    with pytest.raises(ConfigurationError, match=said):
        spark_kafka_options(given, "b:1", read)


def test_spark_redacts_every_secret_option() -> None:
    # Spark redacts an option's value when its name matches the session's
    # spark.sql.redaction.options.regex (pipelines/session.py sets it): every secret the
    # translation writes or a user may give must match, a PEM key above all.
    settings = {
        **SCRAM,
        "ssl.certificate.location": "client.pem",
        "ssl.key.location": "client.key",
        "ssl.key.password": SECRET,
    }
    given = ["ssl.keystore.password", "ssl.truststore.password", "sasl.jaas.config"]
    names = [*spark_kafka_options(settings, "b:1", read), *(f"kafka.{n}" for n in given)]
    secrets = [name for name in names if is_secret(name)]
    assert {"kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.ssl.key.password"} <= set(
        secrets
    )
    assert all(re.search(SECRET_OPTIONS_REGEX, name) for name in secrets), secrets
    assert not re.search(SECRET_OPTIONS_REGEX, "kafka.bootstrap.servers")
