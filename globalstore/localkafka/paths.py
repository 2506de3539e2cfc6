"""Where the dev cluster keeps its files, and reading a node's logs back.

A lone node keeps its files in the data directory itself, as it always did; each node of a
cluster in `<data dir>/node-N/`:

    kraft/              the KRaft metadata and the topics' logs (kraft/meta.properties once
                        formatted)
    logs/server.log     the broker's log (rolled over at 20 MB), logs/stdout.log its console
    server.properties, log4j2.yaml
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NodeFiles", "default_data_dir", "log_since", "log_sizes"]


def default_data_dir() -> Path:
    """Where the local broker keeps its data unless told otherwise."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "globalstore" / "kafka"


@dataclass(frozen=True)
class NodeFiles:
    """The files of one broker node under its directory."""

    directory: Path

    @property
    def kraft(self) -> Path:
        """The node's KRaft metadata directory."""
        return self.directory / "kraft"

    @property
    def meta(self) -> Path:
        """KRaft's meta.properties, written when the node's storage is formatted."""
        return self.kraft / "meta.properties"

    @property
    def logs(self) -> Path:
        """The directory of the node's logs."""
        return self.directory / "logs"

    @property
    def log_file(self) -> Path:
        """The broker's own log."""
        return self.logs / "server.log"

    @property
    def stdout_log(self) -> Path:
        """What the JVM wrote to its stdout and stderr."""
        return self.logs / "stdout.log"

    @property
    def properties(self) -> Path:
        """The node's server.properties."""
        return self.directory / "server.properties"

    @property
    def log4j2(self) -> Path:
        """The node's log4j2 configuration."""
        return self.directory / "log4j2.yaml"

    def cluster_id(self) -> str | None:
        """The cluster id the node was formatted with, if it was."""
        for line in self.meta.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                return value.strip()
        return None

    def log_tail(self, lines: int) -> str:
        """The last `lines` lines of the server log, else of stdout.log, or a note that the broker
        wrote none."""
        for candidate in (self.log_file, self.stdout_log):
            if candidate.exists() and candidate.stat().st_size:
                return "\n".join(candidate.read_text(errors="replace").splitlines()[-lines:])
        return "(the broker wrote no log)"


def log_sizes(files: NodeFiles) -> list[int]:
    """The sizes of the node's log files now, for log_since()."""
    return [path.stat().st_size if path.exists() else 0 for path in _logs(files)]


def log_since(files: NodeFiles, sizes: list[int]) -> str:
    """What the node's logs gained since log_sizes() returned `sizes`."""
    text = []
    for path, size in zip(_logs(files), sizes, strict=True):
        if path.exists():
            with path.open("rb") as f:
                f.seek(size if path.stat().st_size >= size else 0)  # rolled over: all
                text.append(f.read().decode(errors="replace"))
    return "".join(text)


def _logs(files: NodeFiles) -> tuple[Path, Path]:
    return files.log_file, files.stdout_log
