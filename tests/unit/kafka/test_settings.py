"""Client settings: one spelling, three sources (options, a properties file, an env var
naming it), and secrets masked wherever a setting is shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from globalstore import ConfigurationError, StoreConfig
from globalstore.kafka.settings import (
    KAFKA_CONFIG_FILE_ENV,
    MASK,
    ClientSettings,
    kafka_config_options,
    mask_text,
    masked,
    read_properties,
)

SECRET = "s3cr=t:pa\\ss"
SCRAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "app",
    "sasl.password": SECRET,
}


@click.command()
@kafka_config_options
def show(kafka_config: dict[str, str]) -> None:
    click.echo(repr(sorted(kafka_config.items())))


def _run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(show, list(args), env=env, catch_exceptions=False)


def test_properties_file_reads_java_style_lines(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n! another\n\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        f"sasl.password={SECRET}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\\n"
        '    required username="app";\n'
    )
    assert read_properties(path) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.password": SECRET,  # only the first '=' or ':' separates
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="app";',
    }


def test_a_bad_properties_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SSL\njust-a-word\n")
    with pytest.raises(ConfigurationError, match=r"client\.properties:2: expected KEY=VALUE"):
        read_properties(path)
    with pytest.raises(ConfigurationError, match="cannot read"):
        read_properties(tmp_path / "missing.properties")


def test_options_win_over_the_file_and_the_env_var_names_it(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.username=from-file\n")
    by_option = _run("--kafka-config-file", str(path), "--kafka-config", "sasl.username=app")
    assert "('sasl.username', 'app')" in by_option.output
    assert "('security.protocol', 'SASL_SSL')" in by_option.output
    by_env = _run(env={KAFKA_CONFIG_FILE_ENV: str(path)})
    assert "('sasl.username', 'from-file')" in by_env.output


def test_the_old_option_still_works_and_warns() -> None:
    result = CliRunner().invoke(show, ["--kafka-option", "client.id=x"])
    assert result.exit_code == 0
    assert "('client.id', 'x')" in result.stdout
    assert "--kafka-option is deprecated; use --kafka-config" in result.stderr
    assert "--kafka-option" not in CliRunner().invoke(show, ["--help"]).output


def test_a_missing_file_is_a_usage_error_naming_the_option(tmp_path: Path) -> None:
    result = CliRunner().invoke(show, ["--kafka-config-file", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "--kafka-config-file" in result.output and "cannot read" in result.output


def test_a_malformed_secret_option_does_not_echo_the_secret() -> None:
    result = CliRunner().invoke(show, ["--kafka-config", f"sasl.password {SECRET}"])
    assert result.exit_code == 2
    assert "expected KEY=VALUE" in result.output
    assert "s3cr" not in result.output


def test_secrets_are_masked_in_every_view() -> None:
    settings = {**SCRAM, "sasl.jaas.config": f'x password="{SECRET}";', "ssl.key.pem": "KEY"}
    shown = masked(settings)
    assert shown["sasl.password"] == shown["sasl.jaas.config"] == shown["ssl.key.pem"] == MASK
    assert shown["sasl.username"] == "app"  # not a secret: it says who failed
    assert SECRET not in mask_text(f"refused {SECRET!s} here", settings)
    assert SECRET not in repr(ClientSettings(settings))


# Every setting whose value is a secret: librdkafka's (2.16) and the Java client's (4.1, its
# PASSWORD type; names the pipelines pass on with a "kafka." prefix).
LIBRDKAFKA_SECRETS = [
    "sasl.password", "sasl.jaas.config", "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.private.key.passphrase", "ssl.key.password", "ssl.key.pem",
    "ssl.keystore.password",
]  # fmt: skip
JAVA_SECRETS = [
    "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.assertion.private.key.passphrase",
]  # fmt: skip


@pytest.mark.parametrize("name", sorted({*LIBRDKAFKA_SECRETS, *JAVA_SECRETS}))
def test_every_client_secret_is_masked(name: str) -> None:
    for spelled in (name, f"kafka.{name}", name.upper()):
        assert masked({spelled: "value"}) == {spelled: MASK}, spelled
        assert "value" not in mask_text("refused value", {spelled: "value"}), spelled


def test_store_config_repr_masks_the_password_and_keeps_mapping_behaviour() -> None:
    config = StoreConfig(topic="t", bootstrap_servers="h:1", path=Path("p"), kafka_config=SCRAM)
    assert SECRET not in repr(config) and MASK in repr(config)
    assert config.kafka_config == SCRAM
    assert config.consumer_config()["sasl.password"] == SECRET  # the client still gets it


def test_a_malformed_secret_line_in_the_file_is_named_not_quoted(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("sasl.password s3cr\n")
    with pytest.raises(ConfigurationError) as info:
        read_properties(path)
    assert "client.properties:1" in str(info.value) and "sasl.password=..." in str(info.value)
    assert "s3cr" not in str(info.value)


def test_every_store_command_takes_the_settings_and_the_cli_tells_its_version() -> None:
    from globalstore.cli import main  # noqa: PLC0415 - only this test needs the whole CLI

    version = CliRunner().invoke(main, ["--version"])
    assert version.exit_code == 0 and version.output.startswith("globalstore, version ")
    for command in ("restore", "get", "scan", "count", "status", "serve", "migrate"):
        args = [command, "--help"] if command != "migrate" else ["migrate", "run", "--help"]
        shown = CliRunner().invoke(main, args).output
        assert "--kafka-config-file" in shown and KAFKA_CONFIG_FILE_ENV in shown, command
