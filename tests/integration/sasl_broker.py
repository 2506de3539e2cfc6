"""A local broker that authenticates and authorizes: for the tests that need ACLs.

The broker (globalstore.localkafka.LocalKafka, a real Kafka) gets a second client listener,
SASL_PLAINTEXT with SASL/PLAIN users, and the KRaft StandardAuthorizer. The PLAINTEXT
listener stays open for the test harness: its principal, User:ANONYMOUS, is a super user, so
the launcher's readiness check, topic creation, producing and granting ACLs work there
unchanged. Everything under test connects to the SASL listener as an ordinary user.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from globalstore.localkafka import BrokerExitedError, LocalKafka, PortInUseError, free_port
from globalstore.localkafka.ports import lost_port_race
from tests.ports import PortTakenError, on_a_free_port

_HOST = "127.0.0.1"
SASL_LISTENER = "SASL_PLAINTEXT"
USERS = {"admin": "admin-secret", "reader": "reader-secret"}


@dataclass(frozen=True)
class SaslBroker:
    plain_bootstrap: str  # PLAINTEXT, super user: for setting things up
    sasl_bootstrap: str  # SASL_PLAINTEXT: for the client under test
    admin: AdminClient  # on the PLAINTEXT listener

    def client_config(self, user: str) -> dict[str, Any]:
        """librdkafka settings that log in as `user` on the SASL listener."""
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
        }

    def allow(self, user: str, topic: str, *operations: AclOperation) -> None:
        """Grant `user` each operation on `topic` (literal name), and wait for the grant."""
        bindings = [
            AclBinding(
                ResourceType.TOPIC,
                topic,
                ResourcePatternType.LITERAL,
                f"User:{user}",
                "*",
                operation,
                AclPermissionType.ALLOW,
            )
            for operation in operations
        ]
        for future in self.admin.create_acls(bindings).values():
            future.result(timeout=30)


def sasl_properties(port: int, controller_port: int, sasl_port: int) -> dict[str, str]:
    """server.properties overrides: the extra listener, its users and the authorizer."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
        + ";"
    )
    name = SASL_LISTENER.lower()
    return {
        "listeners": (
            f"PLAINTEXT://{_HOST}:{port},CONTROLLER://{_HOST}:{controller_port},"
            f"{SASL_LISTENER}://{_HOST}:{sasl_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://{_HOST}:{port},{SASL_LISTENER}://{_HOST}:{sasl_port}",
        "listener.security.protocol.map": (
            f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,{SASL_LISTENER}:SASL_PLAINTEXT"
        ),
        f"listener.name.{name}.sasl.enabled.mechanisms": "PLAIN",
        f"listener.name.{name}.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # ANONYMOUS is whoever comes in over a PLAINTEXT listener: the harness, the launcher's
        # readiness check and the controller listener. admin is the SASL super user.
        "super.users": "User:ANONYMOUS;User:admin",
        "allow.everyone.if.no.acl.found": "false",
    }


@contextlib.contextmanager
def sasl_broker(data_dir: Path) -> Iterator[SaslBroker]:
    """Start a fresh broker with a SASL listener and ACLs in `data_dir`; stop it after."""
    broker, sasl_port = _started_broker(data_dir)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        yield SaslBroker(broker.bootstrap, f"{_HOST}:{sasl_port}", admin)
    finally:
        broker.stop()


def _started_broker(data_dir: Path) -> tuple[LocalKafka, int]:
    """The broker and its SASL port. Its three ports are picked free, then bound by the JVM:
    if another process took one in between, start again on others."""

    def start(port: int) -> tuple[LocalKafka, int]:
        sasl_port = free_port()
        while sasl_port in (port, port + 1):
            sasl_port = free_port()
        broker = LocalKafka(
            port=port,
            data_dir=data_dir,
            heap="512m",
            extra_config=sasl_properties(port, port + 1, sasl_port),
        )
        try:
            broker.start(fresh=True, timeout=180)
        except PortInUseError as exc:
            raise PortTakenError(str(exc)) from exc
        except BrokerExitedError as exc:
            if lost_port_race(broker.log_file.read_text(errors="replace")):
                raise PortTakenError(str(exc)) from exc
            raise
        return broker, sasl_port

    return on_a_free_port(start)
