"""A snapshot's manifest, and the staging directory an install checks against it.

    manifest.json   {"manifest": 1, "topic": ..., "topic_id": ..., "layout": ...,
                     "value_format": ..., "transform_version": ..., "transform_format": ...,
                     "offsets": {"<partition>": <next offset>},
                     "files": [{"name": ..., "size": ..., "sha256": ...}, ...]}

The sender hashes each file as it sends it (stream.tar_chunks) and sends the manifest last;
the receiver hashes each file as it writes it (Staging.add) and compares (Staging.verify):
every file present with its size and hash, nothing else. The transform entries (null: no
transform) came later: a manifest without them parses as written without a transform.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from globalstore.storage.meta import Meta

__all__ = ["MANIFEST", "VERSION", "FileEntry", "Manifest", "Sha256Behind", "Staging"]

MANIFEST = "manifest.json"
VERSION = 1  # of the manifest's own format
_CHUNK = 1 << 20
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # what RocksDB names its files: no paths
_SHA256 = re.compile(r"[0-9a-f]{64}")


class Sha256Behind:
    """The SHA-256 of chunks, hashed on a thread of its own one chunk behind the caller.

    hashlib lets go of the GIL while it hashes, so the caller moves the next chunk (receives
    and writes it, or reads and sends it) while this one is hashed. Hashed in line, a 4 GB
    snapshot boot spent about as long hashing as moving the bytes
    (benchmarks/results/history.md, "Partitioned index and filters")."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="snapshot-sha256")
        self._pending: Future[None] | None = None

    def __enter__(self) -> Sha256Behind:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._thread.shutdown(cancel_futures=True)

    def update(self, chunk: bytes) -> None:
        """Hash `chunk` on the hashing thread once the chunk before it is done; returns at once."""
        self._caught_up()
        self._pending = self._thread.submit(self._digest.update, chunk)

    def hexdigest(self) -> str:
        """The digest of every chunk given, once the last one is hashed."""
        self._caught_up()
        return self._digest.hexdigest()

    def _caught_up(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One file of a snapshot: its name, size and SHA-256."""

    name: str
    size: int
    sha256: str

    @classmethod
    def of_file(cls, path: Path) -> FileEntry:
        """The entry of a file on disk (read once, in chunks)."""
        digest, size = hashlib.sha256(), 0
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        return cls(path.name, size, digest.hexdigest())


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a snapshot holds: its files, and the position and formats of the store in them."""

    MAX_BYTES = 1 << 22  # a checkpoint has thousands of files at most, not millions

    files: tuple[FileEntry, ...]
    topic: str | None
    topic_id: str | None
    layout: int | None
    value_format: int | None
    offsets: dict[int, int]
    transform_version: int | None = None
    transform_format: int | None = None

    @classmethod
    def of(cls, files: Sequence[FileEntry], meta: Meta) -> Manifest:
        """The manifest of `files`, with the topic, offsets and formats `meta` records."""
        return cls(
            tuple(files), meta.topic, meta.topic_id, meta.layout, meta.value_format,
            dict(meta.offsets), meta.transform_version, meta.transform_format,
        )  # fmt: skip

    def to_bytes(self) -> bytes:
        """The manifest as indented UTF-8 JSON, offsets in partition order."""
        document = {
            "manifest": VERSION,
            "topic": self.topic,
            "topic_id": self.topic_id,
            "layout": self.layout,
            "value_format": self.value_format,
            "transform_version": self.transform_version,
            "transform_format": self.transform_format,
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
            "files": [dataclasses.asdict(f) for f in self.files],
        }
        return json.dumps(document, indent=1).encode("utf-8")

    @classmethod
    def parse(cls, raw: bytes) -> Manifest:
        """ValueError unless `raw` is a manifest of this version naming plain file names."""
        if len(raw) > cls.MAX_BYTES:
            raise ValueError(f"the manifest is larger than {cls.MAX_BYTES} bytes")
        try:
            doc = json.loads(raw)
            if doc["manifest"] != VERSION:
                raise ValueError(f"manifest version {doc['manifest']!r}, not {VERSION}")
            files = tuple(_entry(f) for f in doc["files"])
            offsets = {int(p): int(o) for p, o in doc["offsets"].items()}
            manifest = cls(
                files, _opt(doc["topic"], str), _opt(doc["topic_id"], str),
                _opt(doc["layout"], int), _opt(doc["value_format"], int), offsets,
                _opt(doc.get("transform_version"), int), _opt(doc.get("transform_format"), int),
            )  # fmt: skip
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"the manifest does not parse: {exc!r}") from None
        if len({f.name for f in files}) != len(files):
            raise ValueError("the manifest names a file twice")
        return manifest


def _entry(raw: Any) -> FileEntry:
    entry = FileEntry(raw["name"], raw["size"], raw["sha256"])
    _check_name(entry.name)
    if type(entry.size) is not int or entry.size < 0 or not _SHA256.fullmatch(entry.sha256):
        raise ValueError(f"bad manifest entry {raw!r}")
    return entry


def _opt(value: Any, kind: type) -> Any:
    if value is not None and type(value) is not kind:
        raise TypeError(f"{value!r} is not {kind.__name__}")
    return value


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a plain file name")


class Staging:
    """A directory an install writes a snapshot's files into, hashing each as it is written.
    `check` runs between chunks: it raises to stop the install (deadline, close())."""

    def __init__(self, directory: Path, check: Callable[[], None]) -> None:
        directory.mkdir()
        self.directory = directory
        self._check = check
        self.files: dict[str, FileEntry] = {}

    def add(self, name: str, data: IO[bytes]) -> None:
        """Write `data` to a new file `name` (a plain name, not seen before)."""
        _check_name(name)
        if name in self.files:
            raise ValueError(f"{name!r} appears twice in the snapshot")
        size = 0
        # x: never through an existing link
        with (self.directory / name).open("xb") as out, Sha256Behind() as digest:
            while chunk := data.read(_CHUNK):
                self._check()
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
            self.files[name] = FileEntry(name, size, digest.hexdigest())

    def verify(self, manifest: Manifest) -> None:
        """ValueError naming the first difference between what arrived and the manifest."""
        expected = {f.name: f for f in manifest.files}
        missing = sorted(expected.keys() - self.files.keys())
        if missing:
            raise ValueError(f"{missing[0]} is in the manifest but not in the snapshot")
        extra = sorted(self.files.keys() - expected.keys())
        if extra:
            raise ValueError(f"{extra[0]} is in the snapshot but not in the manifest")
        for name, entry in sorted(self.files.items()):
            if entry.size != expected[name].size:
                raise ValueError(f"{name} has {entry.size} bytes, the manifest says "
                                 f"{expected[name].size}")  # fmt: skip
            if entry.sha256 != expected[name].sha256:
                raise ValueError(f"{name} does not match its SHA-256 in the manifest")
