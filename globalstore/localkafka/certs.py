"""Certificates for a secured dev cluster, made with the `openssl` command (OpenSSL 3).

Kafka reads PEM files directly (`ssl.keystore.type=PEM`), and so does librdkafka, so no
keytool and no Java keystore is involved. Keys are EC P-256: generating one takes
milliseconds where an RSA key takes a good part of a second.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from globalstore.localkafka.errors import LocalKafkaError

__all__ = ["BROKER_EXTENSIONS", "CLIENT_EXTENSIONS", "KeyPair", "make_ca", "make_signed"]

_DAYS = "3650"  # a dev cluster's data directory may live for years; nothing expires under it
_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
# Every extension is given here rather than taken from the system's openssl.cnf, whose
# defaults differ between distributions (Debian's marks every `req -x509` certificate a CA).
_CA_EXTENSIONS = ("basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign,cRLSign")
_LEAF = ("basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature")
# The broker's certificate also serves as its client certificate towards the other brokers.
BROKER_EXTENSIONS = (
    *_LEAF,
    "extendedKeyUsage=serverAuth,clientAuth",
    "subjectAltName=IP:127.0.0.1,DNS:localhost",
)
CLIENT_EXTENSIONS = (*_LEAF, "extendedKeyUsage=clientAuth")


@dataclass(frozen=True)
class KeyPair:
    """A private key (PKCS#8 PEM) and its certificate (PEM)."""

    key: Path
    cert: Path

    def exists(self) -> bool:
        """Whether both the key and the certificate file exist."""
        return self.key.exists() and self.cert.exists()


def make_ca(pair: KeyPair, name: str) -> None:
    """A self-signed certificate authority."""
    _openssl_req(pair, name, _CA_EXTENSIONS, signer=None)


def make_signed(pair: KeyPair, name: str, extensions: Sequence[str], ca: KeyPair) -> None:
    """A certificate for `name` signed by `ca`."""
    _openssl_req(pair, name, extensions, signer=ca)


def _openssl_req(
    pair: KeyPair, name: str, extensions: Sequence[str], signer: KeyPair | None
) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise LocalKafkaError(
            "a secured cluster needs the `openssl` command (OpenSSL 3) to make its "
            "certificates: install it (e.g. `apt-get install openssl`)"
        )
    signing = ["-CA", str(signer.cert), "-CAkey", str(signer.key)] if signer else []
    command = [
        openssl, "req", "-x509", *_KEY, "-days", _DAYS, "-subj", f"/CN={name}",
        "-keyout", str(pair.key), "-out", str(pair.cert), *signing,
        *(argument for extension in extensions for argument in ("-addext", extension)),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LocalKafkaError(
            f"openssl could not make the certificate {pair.cert.name} (OpenSSL 3 is "
            f"needed):\n{result.stderr.strip()}"
        )
    pair.key.chmod(0o600)
