"""`globalstore serve --host 0.0.0.0` (every interface) needs a token or the Host names
clients use: without either it is refused in one line, exit status 2, before anything starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from globalstore.cli import main

_START = ["serve", "--topic", "t", "--bootstrap-servers", "127.0.0.1:1"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_every_interface_without_a_token_or_allowed_hosts_is_refused(
    host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GLOBALSTORE_TOKEN", raising=False)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as held:
        held.bind((host, 0))  # were it not refused, listening would fail: it never serves
        held.listen()
        port = str(held.getsockname()[1])
        args = [*_START, "--path", str(tmp_path / "s"), "--host", host, "--port", port]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: --host {host} answers anyone") and "--allowed-host" in line
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("more", "token"),
    [(["--allowed-host", "store.example.com"], None), ([], "s3cret")],
    ids=["allowed-host", "token"],
)
def test_every_interface_with_a_token_or_allowed_hosts_goes_on(
    more: list[str], token: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if token is None:
        monkeypatch.delenv("GLOBALSTORE_TOKEN", raising=False)
    else:
        monkeypatch.setenv("GLOBALSTORE_TOKEN", token)
    with socket.socket() as held:  # past the check, listening fails: nothing starts
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        args = [*_START, "--path", str(tmp_path / "s"), "--host", "0.0.0.0", "--port", str(port)]
        result = CliRunner().invoke(main, [*args, *more])
    assert result.exit_code == 2, result.output
    assert f"cannot listen on 0.0.0.0:{port}" in result.output, result.output
