"""How a dev cluster is secured: plaintext, SASL_SSL with SCRAM-SHA-512 users, or mutual TLS.

A secured cluster keeps its material under `<data dir>/security/` (mode 0700), made on its
first start and reused by every restart:

    ca.pem, ca.key                       the cluster's CA
    broker-keystore.pem                  the brokers' key and certificate, one PEM file
                                         (SAN IP:127.0.0.1 and DNS:localhost)
    client-admin.pem/.key, client-app.pem/.key
                                         a client certificate per user, signed by the CA
    untrusted-ca.pem, untrusted-client.pem/.key
                                         a second CA and a client certificate it signed:
                                         material the cluster must refuse (negative tests)
    users.properties                     the SCRAM users' random passwords (mode 0600)

Users: `admin`, which the brokers also log in as among themselves, and `app`, an ordinary
client. No authorizer is configured: what these modes test is authentication, and any
authenticated user may do anything (extra_config can add an authorizer and super users).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

from globalstore.localkafka.certs import (
    BROKER_EXTENSIONS,
    CLIENT_EXTENSIONS,
    KeyPair,
    make_ca,
    make_signed,
)
from globalstore.localkafka.errors import LocalKafkaError
from globalstore.localkafka.settings import render_properties

__all__ = [
    "BROKER_USER",
    "SCRAM",
    "USERS",
    "Security",
    "SecurityFiles",
    "broker_security",
    "client_settings",
    "format_arguments",
    "parse_security",
    "untrusted_client_settings",
    "write_private",
    "write_properties",
]

USERS = ("admin", "app")
SCRAM = "SCRAM-SHA-512"
BROKER_USER = "admin"


class Security(StrEnum):
    """How the local cluster's clients connect: plaintext, SASL/SCRAM over TLS, or mutual TLS."""

    PLAINTEXT = "plaintext"
    SASL_SSL = "sasl_ssl"
    MTLS = "mtls"

    @property
    def protocol(self) -> str:
        """Kafka's name of the client listener's security protocol."""
        return {"plaintext": "PLAINTEXT", "sasl_ssl": "SASL_SSL", "mtls": "SSL"}[self.value]


def parse_security(value: Security | str) -> Security:
    """`value` as a Security, or a ValueError naming the choices."""
    try:
        return Security(value)
    except ValueError:
        choices = ", ".join(repr(s.value) for s in Security)
        raise ValueError(f"security must be one of {choices}, not {value!r}") from None


class SecurityFiles:
    """The files of a secured cluster, in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca = KeyPair(directory / "ca.key", directory / "ca.pem")
        self.broker = KeyPair(directory / "broker.key", directory / "broker.pem")
        self.keystore = directory / "broker-keystore.pem"
        self.untrusted_ca = KeyPair(directory / "untrusted-ca.key", directory / "untrusted-ca.pem")
        self.untrusted_client = KeyPair(
            directory / "untrusted-client.key", directory / "untrusted-client.pem"
        )
        self.passwords = directory / "users.properties"
        self.scram_arguments = directory / "format-scram.args"  # the storage tool's @file

    def client(self, user: str) -> KeyPair:
        """The key and certificate of client `user`; ValueError for an unknown user."""
        _check_user(user)
        return KeyPair(self.directory / f"client-{user}.key", self.directory / f"client-{user}.pem")

    def exists(self) -> bool:
        """Whether the security files were made (their directory exists)."""
        return self.directory.is_dir()

    def create(self, formatted: bool) -> None:
        """Make every file unless they exist. They are made in a scratch directory renamed at
        the end, so an interrupted start never leaves a half-made set that looks usable.
        `formatted`: the cluster's storage was formatted, with the users of an earlier set."""
        if self.exists():
            return
        if formatted:  # its SCRAM users have passwords nobody knows any more
            raise LocalKafkaError(
                f"{self.directory} is missing but the cluster beside it was formatted with "
                "it: wipe the data directory (--fresh)"
            )
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".security-", dir=self.directory.parent))
        try:
            SecurityFiles(scratch)._make()
            scratch.rename(self.directory)  # mkdtemp made it 0700
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def password(self, user: str) -> str:
        """The SASL password of `user`; LocalKafkaError if the cluster was never started."""
        _check_user(user)
        try:
            lines = self.passwords.read_text().splitlines()
        except OSError as exc:
            raise LocalKafkaError(
                f"no passwords in {self.passwords}: start the cluster first"
            ) from exc
        return dict(line.split("=", 1) for line in lines if line)[user]

    def _make(self) -> None:
        make_ca(self.ca, "globalstore-dev-ca")
        make_signed(self.broker, "localhost", BROKER_EXTENSIONS, self.ca)
        write_private(self.keystore, self.broker.key.read_text() + self.broker.cert.read_text())
        for user in USERS:
            make_signed(self.client(user), user, CLIENT_EXTENSIONS, self.ca)
        make_ca(self.untrusted_ca, "not-the-cluster-ca")
        make_signed(self.untrusted_client, "app", CLIENT_EXTENSIONS, self.untrusted_ca)
        passwords = {user: secrets.token_hex(16) for user in USERS}
        write_private(self.passwords, render_properties(passwords))


def _check_user(user: str) -> None:
    if user not in USERS:
        raise ValueError(f"user must be one of {', '.join(USERS)}, not {user!r}")


def broker_security(security: Security, files: SecurityFiles) -> dict[str, str]:
    """The settings that secure a node's client listener (named security.protocol)."""
    if security is Security.PLAINTEXT:
        return {}
    tls = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(files.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(files.ca.cert),
    }
    if security is Security.MTLS:
        return {**tls, "ssl.client.auth": "required"}
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{BROKER_USER}" password="{files.password(BROKER_USER)}";'
    )
    return {
        **tls,
        "sasl.enabled.mechanisms": SCRAM,
        "sasl.mechanism.inter.broker.protocol": SCRAM,
        f"listener.name.sasl_ssl.{SCRAM.lower()}.sasl.jaas.config": jaas,
    }


def format_arguments(security: Security, files: SecurityFiles) -> list[str]:
    """The storage tool's arguments that create the SCRAM users in the first metadata: the
    brokers must know `admin` before they can log in to each other. The passwords go in a
    file the tool reads its arguments from (`@file`, one a line; 0600 beside the users'):
    on its command line, every local user would see them (`ps`)."""
    if security is not Security.SASL_SSL:
        return []
    arguments = [
        argument
        for user in USERS
        for argument in ("--add-scram", f"{SCRAM}=[name={user},password={files.password(user)}]")
    ]
    write_private(files.scram_arguments, "".join(f"{argument}\n" for argument in arguments))
    return [f"@{files.scram_arguments}"]


def client_settings(security: Security, files: SecurityFiles, user: str) -> dict[str, str]:
    """librdkafka's settings for `user` on this cluster (none for plaintext)."""
    _check_user(user)
    if security is Security.PLAINTEXT:
        return {}
    tls = {"security.protocol": security.protocol, "ssl.ca.location": str(files.ca.cert)}
    if security is Security.SASL_SSL:
        return {
            **tls,
            "sasl.mechanism": SCRAM,
            "sasl.username": user,
            "sasl.password": files.password(user),
        }
    return {**tls, **_certificate(files.client(user))}


def untrusted_client_settings(
    security: Security, files: SecurityFiles, user: str
) -> dict[str, str]:
    """`user`'s settings with material the cluster does not trust: with mtls a client
    certificate signed by another CA, with sasl_ssl that other CA as the only one trusted
    (so the client refuses the brokers' certificate)."""
    settings = client_settings(security, files, user)
    if security is Security.MTLS:
        return {**settings, **_certificate(files.untrusted_client)}
    if security is Security.SASL_SSL:
        return {**settings, "ssl.ca.location": str(files.untrusted_ca.cert)}
    raise LocalKafkaError("a plaintext cluster trusts anyone: there is no untrusted material")


def _certificate(pair: KeyPair) -> dict[str, str]:
    return {"ssl.certificate.location": str(pair.cert), "ssl.key.location": str(pair.key)}


def write_properties(path: Path | str, settings: Mapping[str, str]) -> Path:
    """`settings` as a Java-style properties file (`key=value` lines), mode 0600."""
    path = Path(path)
    write_private(path, render_properties(settings))
    return path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only, also when the file existed. A
    symlink at `path` is refused (OSError): it would aim the secret, and the chmod, at
    whatever file it names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(path, flags, 0o600)
    with os.fdopen(descriptor, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(text)
