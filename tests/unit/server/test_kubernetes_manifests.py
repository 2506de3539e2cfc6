"""The Kubernetes manifests in deploy/kubernetes/ are valid against the Kubernetes schemas
(kubernetes-validate's, shipped inside that package, so it runs offline; and kubeconform's,
built with Go on first use unless KUBECONFORM or the PATH names one), and they hold what
the store relies on: probes on /readyz and /healthz, the store on the pod's own volume, a
snapshot boot from the serve Service, options the commands really take, settings by the
names the code reads, and a termination grace that covers the shutdown."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
import yaml

from globalstore.cli.serve import serve
from globalstore.cli.store import restore
from globalstore.config import BOOTSTRAP_ENV
from globalstore.kafka.settings import KAFKA_CONFIG_FILE_ENV
from globalstore.snapshots.fetch import INSECURE_ENV, PEER_TOKEN_ENV
from tests.go_tools import go_binary

KUBERNETES = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes"
MANIFESTS = sorted(KUBERNETES.glob("*.yaml"))
SCHEMA_VERSION = "1.30.0"  # the oldest Kubernetes these files are for
KUBECONFORM_MODULE, KUBECONFORM_VERSION = "github.com/yannh/kubeconform/cmd/kubeconform", "v0.8.0"
CLOSE_S = 15  # what the grace leaves the store's close, at least
Doc = dict[str, Any]


def _documents() -> Iterator[tuple[Path, Doc]]:
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict), f"{path.name}: a document that is not a mapping"
            yield path, doc


def _of_kind(kind: str) -> list[Doc]:
    return [doc for _, doc in _documents() if doc["kind"] == kind]


def _options(args: list[str]) -> dict[str, str]:
    """--name=value arguments by name (every option here is written with its value)."""
    return dict(arg.split("=", 1) for arg in args if arg.startswith("--"))


def _env(container: Doc) -> dict[str, Doc]:
    return {item["name"]: item for item in container.get("env", [])}


def _check_options(command: click.Command, args: list[str]) -> None:
    """Every option is one `command` declares, and a value its type takes (paths aside:
    they name files of the pod)."""
    declared = {opt: param for param in command.params for opt in param.opts}
    for name, value in _options(args).items():
        assert name in declared, f"{command.name} has no option {name}"
        kind = declared[name].type
        if not isinstance(kind, click.Path):
            kind.convert(value, declared[name], None)


def _stateful_sets() -> dict[str, Doc]:
    return {doc["metadata"]["name"]: doc for doc in _of_kind("StatefulSet")}


def _services() -> dict[str, Doc]:
    return {doc["metadata"]["name"]: doc for doc in _of_kind("Service")}


def test_the_files_are_there_and_parse() -> None:
    assert [path.name for path in MANIFESTS] == ["app.yaml", "serve.yaml"]
    kinds = sorted(doc["kind"] for _, doc in _documents())
    assert kinds == ["PodDisruptionBudget"] * 2 + ["Service"] * 4 + ["StatefulSet"] * 2


def test_valid_against_the_kubernetes_schemas() -> None:
    validate = pytest.importorskip("kubernetes_validate.utils", reason="kubernetes-validate")
    for path, doc in _documents():
        try:
            validate.validate(doc, SCHEMA_VERSION, strict=True)
        except validate.ValidationError as exc:  # the path inside the document, then why
            pytest.fail(f"{path.name} {doc['kind']}: {list(exc.path)}: {exc.message}")


def test_an_unknown_field_is_caught_by_the_schema_check() -> None:
    """The check above can fail: strict validation refuses a misspelt field."""
    validate = pytest.importorskip("kubernetes_validate.utils", reason="kubernetes-validate")
    broken = _stateful_sets()["orders-store"]
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(validate.ValidationError, match="readinesProbe"):
        validate.validate(broken, SCHEMA_VERSION, strict=True)


def _kubeconform() -> str:
    """KUBECONFORM, or kubeconform on the PATH, or the one built with Go and cached."""
    found = os.environ.get("KUBECONFORM") or shutil.which("kubeconform")
    return found or str(go_binary(KUBECONFORM_MODULE, KUBECONFORM_VERSION, "kubeconform"))


def test_kubeconform_accepts_them(tmp_path: Path) -> None:
    """kubeconform over the schemas kubernetes-validate ships (it cannot download its own
    here), made standalone as kubeconform reads them."""
    validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate")
    schemas = Path(validate.__file__).parent / "kubernetes-json-schema"
    _standalone(schemas / f"v{SCHEMA_VERSION}-local-strict", tmp_path)
    location = str(tmp_path / "{{ .ResourceKind }}{{ .KindSuffix }}.json")
    command = [_kubeconform(), "-strict", "-summary", "-kubernetes-version",
               SCHEMA_VERSION, "-schema-location", location, *map(str, MANIFESTS)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in done.stdout, done.stdout


def _standalone(local: Path, dest: Path) -> None:
    """The schemas of the kinds the manifests use, each with the definitions it refers to
    inside it (kubernetes-validate's refer to one shared file by an absolute path)."""
    shared = "/api/_definitions.json#"
    definitions = json.loads((local / "_definitions.json").read_text())["$defs"]
    for _, doc in _documents():
        group = doc["apiVersion"].replace("/", "-").lower()
        name = f"{doc['kind'].lower()}-{group}.json"
        schema = json.loads((local / name).read_text().replace(shared, "#"))
        (dest / name).write_text(json.dumps({**schema, "$defs": definitions}))


@pytest.mark.parametrize("name", ["orders-store", "orders-service"])
def test_each_pod_keeps_its_store_on_a_volume_of_its_own(name: str) -> None:
    spec = _stateful_sets()[name]["spec"]
    claims = {claim["metadata"]["name"] for claim in spec["volumeClaimTemplates"]}
    pod = spec["template"]["spec"]
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        path = _options(container["args"]).get("--path") or _env(container)["ORDERS_STORE"]["value"]
        mounts = [m for m in container["volumeMounts"] if m["name"] in claims]
        assert any(path.startswith(m["mountPath"] + "/") for m in mounts), container["name"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("name", ["orders-store", "orders-service"])
def test_probes_and_a_grace_period_that_covers_the_shutdown(name: str) -> None:
    pod = _stateful_sets()[name]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {port["name"] for port in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] in ports
    stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert stop[0] == "sleep"
    options = _options(container["args"])
    graceful = options.get("--graceful-seconds") or options["--timeout-graceful-shutdown"]
    needed = int(stop[1]) + int(graceful) + CLOSE_S
    assert pod["terminationGracePeriodSeconds"] >= needed


def test_serve_takes_its_options_and_boots_from_the_serve_service() -> None:
    (container,) = _stateful_sets()["orders-store"]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:2] == ["globalstore", "serve"]
    _check_options(serve, args[2:])
    options = _options(args)
    assert options["--host"] == "0.0.0.0" and "--token-file" in options  # open needs a token
    _check_snapshot_url(options["--bootstrap-from"])
    _check_env(container)


def test_the_app_boots_from_a_snapshot_in_an_init_container_with_its_settings() -> None:
    pod = _stateful_sets()["orders-service"]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (app,) = pod["containers"]
    assert init["args"][:2] == ["globalstore", "restore"]
    _check_options(restore, init["args"][2:])
    options = _options(init["args"])
    _check_snapshot_url(options["--from-snapshot"])
    assert _env(app)["ORDERS_STORE"]["value"] == options["--path"]  # the store it prepared
    assert init["image"] == app["image"]  # the same globalstore version writes the store
    for container in (init, app):
        _check_env(container)


def _check_snapshot_url(url: str) -> None:
    """A GET /v1/snapshot of the serve Service, on its port."""
    parts = urlsplit(url)
    service = _services()[parts.hostname or ""]
    assert parts.path == "/v1/snapshot"
    assert parts.port in {port["port"] for port in service["spec"]["ports"]}
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "orders-store"}
    assert "clusterIP" not in service["spec"]  # routed to ready pods, not a headless name


def _check_env(container: Doc) -> None:
    env = _env(container)
    assert {BOOTSTRAP_ENV, KAFKA_CONFIG_FILE_ENV, PEER_TOKEN_ENV, INSECURE_ENV} <= env.keys()
    config_file = env[KAFKA_CONFIG_FILE_ENV]["value"]
    assert any(config_file.startswith(m["mountPath"] + "/") for m in container["volumeMounts"])


def test_every_service_selects_pods_and_ports_that_exist() -> None:
    pods = [s["spec"]["template"] for s in _stateful_sets().values()]
    for name, service in _services().items():
        selected = [
            pod for pod in pods
            if service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        ]  # fmt: skip
        assert len(selected) == 1, name
        ports = {p["name"] for c in selected[0]["spec"]["containers"] for p in c["ports"]}
        assert {port["targetPort"] for port in service["spec"]["ports"]} <= ports, name
