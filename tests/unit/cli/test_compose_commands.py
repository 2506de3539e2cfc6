"""The commands the compose stack runs are ones the CLI takes: its app's `globalstore serve`
parses, and passes the rule for binding every interface (a token or named Host headers)."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from globalstore.cli.serve import check_exposure, serve

COMPOSE = Path(__file__).resolve().parents[3] / "compose" / "docker-compose.yml"


def _app_serve_args() -> list[str]:
    command = yaml.safe_load(COMPOSE.read_text())["services"]["app"]["command"]
    shell, flag, script = shlex.split(command)
    assert (shell, flag) == ("sh", "-c"), command
    words = shlex.split(script.replace("$$", "$"))
    assert words[:3] == ["exec", "globalstore", "serve"], script
    return words[3:]


def test_the_app_serves_on_every_interface_with_its_host_names_allowed() -> None:
    context = serve.make_context("serve", _app_serve_args())
    params = context.params
    assert params["host"] == "0.0.0.0"
    assert "127.0.0.1" in params["allowed_hosts"] and "localhost" in params["allowed_hosts"]
    check_exposure(
        params["host"], params["allowed_hosts"], has_token=params["token_file"] is not None
    )
