"""Start, stop and inspect a single-node Apache Kafka broker (KRaft) as a background JVM.

One launcher shared by the CLI (`globalstore kafka ...`), the tests, the benchmarks and the
demo. The broker is Apache Kafka's own code (see jars.py); its data directory holds the
KRaft metadata, the topics, the logs and a small `broker.json` describing the running
process, so `status` and `stop` work from any later process.

    with LocalKafka(port=19092, data_dir=tmp) as kafka:
        produce_to(kafka.bootstrap)
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

from globalstore.localkafka.errors import BrokerExitedError, LocalKafkaError, PortInUseError
from globalstore.localkafka.jars import cache_root, resolve_kafka_jars
from globalstore.localkafka.java import check_java
from globalstore.localkafka.ports import HOST as _HOST
from globalstore.localkafka.ports import free_port, lost_port_race, port_is_free

DEFAULT_KAFKA_VERSION = "4.1.1"
DEFAULT_PORT = 9092
DEFAULT_HEAP = "1g"
_STATE_FILE = "broker.json"
ANY_PORT = 0  # LocalKafka(port=ANY_PORT): start() picks free ports and retries a lost race
_PORT_ATTEMPTS = 5


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path
    version: str

    def describe(self) -> str:
        state = f"running (pid {self.pid})" if self.running else "stopped"
        return (
            f"state:     {state}\nbootstrap: {self.bootstrap}\n"
            f"data dir:  {self.data_dir}\nversion:   {self.version}"
        )


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "globalstore" / "kafka"


def server_settings(
    port: int, controller_port: int, log_dir: Path | str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The settings of a combined broker+controller node that is alone in its cluster."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{_HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{_HOST}:{port},CONTROLLER://{_HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{_HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        # One node: every internal topic has one replica, and small partition counts keep
        # the first group/transaction use fast.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "delete.topic.enable": "true",
    }
    settings.update(extra or {})
    return settings


def render_server_properties(
    port: int, controller_port: int, log_dir: Path, extra: Mapping[str, str] | None = None
) -> str:
    """server.properties for a combined broker+controller node that is alone in its cluster."""
    settings = server_settings(port, controller_port, log_dir, extra)
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def render_log4j2(log_file: Path) -> str:
    """A log4j2 config that writes the broker's log to one rolling file."""
    return (
        "Configuration:\n"
        "  Appenders:\n"
        "    RollingFile:\n"
        "      name: file\n"
        f"      fileName: {log_file}\n"
        f"      filePattern: {log_file}.%i\n"
        "      PatternLayout: {pattern: '[%d] %p %m (%c)%n'}\n"
        "      SizeBasedTriggeringPolicy: {size: 20MB}\n"
        "      DefaultRolloverStrategy: {max: 3}\n"
        "  Loggers:\n"
        "    Root: {level: INFO, AppenderRef: [{ref: file}]}\n"
    )


class LocalKafka:
    """A single-node KRaft broker in a data directory that survives restarts."""

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        data_dir: Path | str | None = None,
        version: str = DEFAULT_KAFKA_VERSION,
        heap: str = DEFAULT_HEAP,
        controller_port: int | None = None,
        extra_config: Mapping[str, str] | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        # port=ANY_PORT: the first start() picks the ports (client and controller) and tries
        # again with new ones if another process binds them first; .port then tells, and
        # later starts reuse it.
        self._any_port = port == ANY_PORT
        self.port = port
        self.controller_port = controller_port or port + 1
        self.data_dir = Path(data_dir) if data_dir else default_data_dir()
        self.version = version
        self.heap = heap
        self.extra_config = dict(extra_config or {})
        self.cache_dir = cache_dir or cache_root()
        self._started_here = False

    @property
    def bootstrap(self) -> str:
        return f"{_HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "server.log"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, fresh: bool = False, timeout: float = 60.0) -> str:
        """Start the broker unless it already runs; wait until it answers; return bootstrap."""
        running = self._running_pid()
        if running is not None and not fresh:
            return self._recorded_bootstrap()
        if running is not None:
            self.stop()
        java = check_java()
        if not self._any_port:
            self._check_ports()
        jars = resolve_kafka_jars(self.version, self.cache_dir)
        if fresh:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        deadline = time.monotonic() + timeout
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            retry = self._any_port and attempt < _PORT_ATTEMPTS
            if self._any_port:
                self.port = free_port()
                self.controller_port = self.port + 1
                try:
                    self._check_ports()
                except PortInUseError:
                    if retry:
                        continue
                    raise
            self._write_config_files()
            self._format_storage(java, jars.classpath)
            logged = self._log_sizes()
            process = self._launch(java, jars.classpath)
            try:
                self._wait_until_ready(process, max(0.0, deadline - time.monotonic()))
            except BrokerExitedError:
                self.stop()
                if retry and lost_port_race(self._log_since(logged)):
                    continue
                raise
            except BaseException:  # timeout, Ctrl-C: the JVM runs in its own session, stop it
                self.stop()
                raise
            break
        self._any_port = False  # from now on the broker is at this address, also after stop
        self._started_here = True
        return self.bootstrap

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM, then SIGKILL after `timeout` seconds. Returns whether a broker was running."""
        pid = self._running_pid()
        if pid is None:
            self._state_file.unlink(missing_ok=True)
            return False
        _signal(pid, signal.SIGTERM)
        if not _wait_for_exit(pid, timeout):
            _signal(pid, signal.SIGKILL)
            _wait_for_exit(pid, 10.0)
        self._state_file.unlink(missing_ok=True)
        return True

    def status(self) -> BrokerStatus:
        pid = self._running_pid()
        recorded = self._read_state()
        return BrokerStatus(
            running=pid is not None,
            pid=pid,
            bootstrap=str(recorded.get("bootstrap", self.bootstrap)),
            data_dir=self.data_dir,
            version=str(recorded.get("version", self.version)),
        )

    def log_tail(self, lines: int = 40) -> str:
        for candidate in (self.log_file, self.data_dir / "logs" / "stdout.log"):
            if candidate.exists() and candidate.stat().st_size:
                return "\n".join(candidate.read_text(errors="replace").splitlines()[-lines:])
        return "(the broker wrote no log)"

    def __enter__(self) -> LocalKafka:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Leave alone a broker that was already running before this context began.
        if self._started_here:
            self.stop()

    # -- pieces of start -------------------------------------------------------------------

    @property
    def _state_file(self) -> Path:
        return self.data_dir / _STATE_FILE

    def _check_ports(self) -> None:
        for port, role in ((self.port, "client"), (self.controller_port, "controller")):
            if not port_is_free(port):
                raise PortInUseError(
                    f"port {port} ({role} listener) is already in use on {_HOST}: stop what "
                    "holds it, or pick another port (`globalstore kafka start --port N`)"
                )

    def _logs(self) -> tuple[Path, Path]:
        return self.log_file, self.data_dir / "logs" / "stdout.log"

    def _log_sizes(self) -> list[int]:
        return [path.stat().st_size if path.exists() else 0 for path in self._logs()]

    def _log_since(self, sizes: list[int]) -> str:
        """What the broker's logs gained since _log_sizes() returned `sizes`."""
        text = []
        for path, size in zip(self._logs(), sizes, strict=True):
            if path.exists():
                with path.open("rb") as f:
                    f.seek(size if path.stat().st_size >= size else 0)  # rolled over: all
                    text.append(f.read().decode(errors="replace"))
        return "".join(text)

    def _write_config_files(self) -> None:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        properties = render_server_properties(
            self.port, self.controller_port, self.data_dir / "kraft", self.extra_config
        )
        (self.data_dir / "server.properties").write_text(properties)
        (self.data_dir / "log4j2.yaml").write_text(render_log4j2(self.log_file))

    def _format_storage(self, java: str, classpath: str) -> None:
        # A formatted log dir keeps its cluster id; formatting again would refuse, and the
        # topics of an earlier run must survive a restart.
        if (self.data_dir / "kraft" / "meta.properties").exists():
            return
        command = [
            java, "-cp", classpath, "kafka.tools.StorageTool", "format",
            "--cluster-id", cluster_id(),
            "--config", str(self.data_dir / "server.properties"),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise LocalKafkaError(
                f"formatting {self.data_dir} failed:\n{result.stdout}{result.stderr}"
            )

    def _launch(self, java: str, classpath: str) -> subprocess.Popen[bytes]:
        command = [
            java, f"-Xms{self.heap}", f"-Xmx{self.heap}", "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.yaml'}",
            f"-Dkafka.logs.dir={self.data_dir / 'logs'}",
            "-cp", classpath, "kafka.Kafka", str(self.data_dir / "server.properties"),
        ]  # fmt: skip
        with (self.data_dir / "logs" / "stdout.log").open("ab") as stdout:
            # A session of its own: the broker outlives the CLI that started it and does
            # not receive the terminal's Ctrl-C.
            process = subprocess.Popen(
                command, stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True
            )
        state = {"pid": process.pid, "bootstrap": self.bootstrap, "version": self.version}
        self._state_file.write_text(json.dumps(state))
        return process

    def _wait_until_ready(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": "0"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._state_file.unlink(missing_ok=True)
                raise BrokerExitedError(
                    f"the broker exited with code {process.returncode} during start. "
                    f"Last lines of its log ({self.log_file}):\n{self.log_tail()}"
                )
            with contextlib.suppress(Exception):
                if admin.list_topics(timeout=1.0).brokers:
                    return
            time.sleep(0.2)
        raise LocalKafkaError(
            f"the broker did not answer on {self.bootstrap} within {timeout:.0f}s. "
            f"Last lines of its log:\n{self.log_tail()}"
        )

    # -- the record of a running broker ----------------------------------------------------

    def _read_state(self) -> dict[str, object]:
        try:
            loaded = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def _recorded_bootstrap(self) -> str:
        return str(self._read_state().get("bootstrap", self.bootstrap))

    def _running_pid(self) -> int | None:
        pid = self._read_state().get("pid")
        if not isinstance(pid, int) or not _is_our_broker(pid):
            return None
        return pid


def cluster_id() -> str:
    """16 random bytes in URL-safe base64 without padding, as Kafka's own ids. One in 64 of
    those begins with '-', which the storage tool reads as an option: draw again, as Kafka's
    Uuid.randomUuid() does."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate


def _is_our_broker(pid: int) -> bool:
    """True when `pid` is alive and is a Kafka broker (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if b"kafka.Kafka" not in cmdline:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has already exited


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _wait_for_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _is_our_broker(pid):
            return True
        time.sleep(0.1)
    return not _is_our_broker(pid)
