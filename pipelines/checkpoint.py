"""A checkpoint that knows its source: the Kafka cluster and topics it was written against.

Spark's checkpoint holds the raw topic's offsets and the transform's state, and nothing says
which cluster or which incarnation of a topic those offsets count in. Reused against another
cluster whose raw topic holds as many records, or against a recreated topic, the job would
resume at offsets that mean nothing there: a run that processes nothing and reports success.
So a run records beside Spark's files a small JSON file (`BINDING_FILE`): the cluster id, the
id of every topic the job reads or writes, the pipeline's name and version. A later run
compares, and refuses a checkpoint that belongs elsewhere in one line naming `--reset`,
which moves the checkpoint aside (`move_aside`), never deleting it.

The files are read and written through Hadoop's FileSystem API in Spark's JVM, the API Spark
writes the checkpoint with, so a checkpoint on hdfs:// or s3a:// is checked as a local one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from pyspark.sql import SparkSession

from globalstore.errors import FatalError
from pipelines.spec import Pipeline
from pipelines.topics import Admin

log = logging.getLogger(__name__)

BINDING_FILE = "globalstore-binding.json"
BINDING_FORMAT = 1  # the layout of BINDING_FILE
RESET_HINT = "rerun with --reset to move it aside and start over"


class CheckpointRefused(FatalError):  # noqa: N818 - reads as what happened
    """The checkpoint belongs to another cluster, topic or pipeline, or is ahead of the raw
    topic: resuming from it would skip records or process none."""


@dataclass(frozen=True)
class Binding:
    """What a checkpoint was written against."""

    pipeline: str
    pipeline_version: int
    cluster_id: str
    topic_ids: Mapping[str, str | None]  # topic name -> id; None: the topic does not exist

    def to_json(self) -> str:
        """The binding as sorted, indented JSON with its format number."""
        return json.dumps({"format": BINDING_FORMAT, **asdict(self)}, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Binding:
        """The binding to_json() wrote; KeyError if a field is missing."""
        fields = json.loads(text)
        return cls(
            pipeline=str(fields["pipeline"]),
            pipeline_version=int(fields["pipeline_version"]),
            cluster_id=str(fields["cluster_id"]),
            topic_ids=dict(fields["topic_ids"]),
        )


def mismatches(recorded: Binding, now: Binding) -> list[str]:
    """How `now` differs from what the checkpoint was written against, in words."""
    if recorded.cluster_id != now.cluster_id:
        # Every topic id differs too: the cluster says it all.
        return [f"it was written on Kafka cluster {recorded.cluster_id}, not {now.cluster_id}"]
    said = []
    if (recorded.pipeline, recorded.pipeline_version) != (now.pipeline, now.pipeline_version):
        said.append(
            f"it belongs to pipeline {recorded.pipeline} version {recorded.pipeline_version}, "
            f"not {now.pipeline} version {now.pipeline_version}"
        )
    if recorded.topic_ids.keys() != now.topic_ids.keys():
        said.append(f"it reads and writes {_names(recorded)}, not {_names(now)}")
        return said
    for name, was in sorted(recorded.topic_ids.items()):
        is_now = now.topic_ids[name]
        if is_now != was:
            state = "missing" if is_now is None else f"{is_now} (recreated)"
            said.append(f"topic {name} was id {was}, now {state}")
    return said


def _names(binding: Binding) -> str:
    return ", ".join(sorted(binding.topic_ids))


class CheckpointFiles:
    """A checkpoint directory through Hadoop's FileSystem API (local, hdfs://, s3a://...)."""

    def __init__(self, spark: SparkSession, location: str) -> None:
        context = spark.sparkContext
        jvm = context._jvm
        assert jvm is not None  # a live session has its gateway
        self.location = location
        self._path = jvm.org.apache.hadoop.fs.Path
        self._root = self._path(location)
        self._fs = self._root.getFileSystem(context._jsc.hadoopConfiguration())

    def read(self, name: str) -> str | None:
        """The text of file `name` (a path under the checkpoint); None if there is none."""
        path = self._path(self._root, name)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return bytes(stream.readAllBytes()).decode()
        finally:
            stream.close()

    def write(self, name: str, text: str) -> None:
        """Write file `name` whole or not at all: into a temporary file, then renamed."""
        final, temporary = self._path(self._root, name), self._path(self._root, f".{name}.tmp")
        stream = self._fs.create(temporary, True)
        try:
            stream.write(text.encode())
        finally:
            stream.close()
        # Hadoop's rename does not replace a file. This only replaces the binding of a
        # checkpoint without progress, so a crash in between loses nothing: the next run
        # binds it afresh.
        self._fs.delete(final, False)
        if not self._fs.rename(temporary, final):
            raise OSError(f"cannot rename {temporary} to {final}")

    def source_offsets(self) -> dict[str, dict[int, int]] | None:
        """The source offsets of the latest micro-batch Spark planned, by topic and partition;
        None before the first. Spark's offset log: offsets/<batch id>, whose third line is
        the Kafka source's offsets as JSON ({"topic": {"0": 42, ...}})."""
        offsets = self._path(self._root, "offsets")
        if not self._fs.exists(offsets):
            return None
        names = [status.getPath().getName() for status in self._fs.listStatus(offsets)]
        batches = [int(name) for name in names if name.isdigit()]
        if not batches:
            return None
        text = self.read(f"offsets/{max(batches)}") or ""
        source = json.loads(text.splitlines()[2])
        return {topic: {int(p): o for p, o in parts.items()} for topic, parts in source.items()}

    def move_aside(self) -> str | None:
        """Rename the checkpoint to a sibling named for now; its new location, or None when
        there is no checkpoint."""
        if not self._fs.exists(self._root):
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = self._path(self._root.getParent(), f"{self._root.getName()}.reset-{stamp}")
        if not self._fs.rename(self._root, aside):
            raise CheckpointRefused(f"cannot move checkpoint {self.location} to {aside}")
        return str(aside)


def move_aside(spark: SparkSession, location: str) -> str | None:
    """`--reset`: move the checkpoint at `location` aside; where it went (None: none there)."""
    return CheckpointFiles(spark, location).move_aside()


def bound(
    spark: SparkSession,
    location: str,
    pipeline: Pipeline,
    admin: Admin,
    topics: Sequence[str],
    prepare: Callable[[], None],
) -> None:
    """Refuse a checkpoint that belongs to another source; then `prepare()` (which creates
    the missing topics) and record the source in a checkpoint that has no record of it.
    `topics`: the raw topic first, then those the job writes."""
    files = CheckpointFiles(spark, location)
    unbound = _verify(files, pipeline, admin, topics)
    prepare()
    if unbound:
        files.write(BINDING_FILE, _binding_now(pipeline, admin, topics).to_json())


def _binding_now(pipeline: Pipeline, admin: Admin, topics: Sequence[str]) -> Binding:
    return Binding(
        pipeline=pipeline.name,
        pipeline_version=pipeline.version,
        cluster_id=admin.cluster_id(),
        topic_ids={topic: admin.topic_id(topic) for topic in topics},
    )


def _verify(
    files: CheckpointFiles, pipeline: Pipeline, admin: Admin, topics: Sequence[str]
) -> bool:
    """CheckpointRefused for a checkpoint of another source, or one ahead of the raw topic;
    True when the binding is to be written."""
    source = topics[0]
    committed = files.source_offsets()
    if committed is None:
        return True  # no progress yet: nothing to lose, whatever it was bound to
    text = files.read(BINDING_FILE)
    if text is None:
        log.warning(
            "checkpoint %s has no record of its Kafka cluster and topics (written by an "
            "earlier version): recording this run's; if it was written against another "
            "cluster, %s",
            files.location,
            RESET_HINT,
        )
    else:
        said = mismatches(_recorded(files, text), _binding_now(pipeline, admin, topics))
        if said:
            raise CheckpointRefused(f"checkpoint {files.location}: {'; '.join(said)}; {RESET_HINT}")
    _require_not_ahead(files.location, committed.get(source, {}), admin.end_offsets(source), source)
    return text is None


def _recorded(files: CheckpointFiles, text: str) -> Binding:
    try:
        return Binding.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointRefused(
            f"checkpoint {files.location}: its {BINDING_FILE} cannot be read ({exc}); {RESET_HINT}"
        ) from None


def _require_not_ahead(
    location: str, committed: Mapping[int, int], ends: Mapping[int, int], source: str
) -> None:
    """A raw topic that ends before the checkpoint's offsets was recreated or emptied: Spark
    would wait for offsets that came long ago and process nothing."""
    ahead = {p: o for p, o in sorted(committed.items()) if o > ends.get(p, 0)}
    if ahead:
        where = ", ".join(
            f"partition {p} ends at {ends.get(p, 0)}, not {o}" for p, o in ahead.items()
        )
        raise CheckpointRefused(
            f"checkpoint {location} is ahead of raw topic {source} ({where}): the topic was "
            f"recreated or emptied since; {RESET_HINT}"
        )
