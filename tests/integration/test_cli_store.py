"""The store commands (restore, get, scan, count, status) against a real broker."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result

from globalstore import GlobalStore
from globalstore.cli import main
from globalstore.cli.progress import ProgressBar
from tests.integration.store_support import produce, produce_raw
from tests.ports import closed_port
from tests.value_formats import v3


def one_line_error(result: Result, *fragments: str) -> None:
    """The failure a person reads: exit status 2, one `error:` line naming what is wrong and
    what to do, no traceback."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def run(bootstrap: str, topic: str, path: Path, *args: str) -> Result:
    argv = [args[0], "--topic", topic, "--bootstrap-servers", bootstrap, "--path", str(path)]
    return CliRunner().invoke(main, [*argv, *args[1:]])


@pytest.fixture
def filled(kafka_bootstrap: str, make_topic) -> str:  # type: ignore[no-untyped-def]
    topic = make_topic(partitions=3)
    records = [(f"user-{i:03d}", {"n": i}) for i in range(50)]
    records += [(f"zone-{i}", {"z": i}) for i in range(5)]
    records += [("user-007", None), ("user-008", {"n": -8})]  # a delete and an update
    produce(kafka_bootstrap, topic, records)
    return topic


def test_restore_reports_progress_and_result(kafka_bootstrap: str, filled: str, tmp_path: Path):
    result = run(kafka_bootstrap, filled, tmp_path / "s", "restore")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ready: 54 keys, position 0:")
    # CliRunner's stderr is not a terminal: plain log lines, no carriage-return redraws.
    assert "restoring " + filled + ": 57 records to read" in result.stderr
    assert "restored 57 records in" in result.stderr
    assert "\r" not in result.stderr

    again = run(kafka_bootstrap, filled, tmp_path / "s", "restore")
    assert again.exit_code == 0, again.output
    assert "0 records to read" in again.stderr, "a restart resumes from the stored offsets"


def test_get(kafka_bootstrap: str, filled: str, tmp_path: Path) -> None:
    path = tmp_path / "s"
    result = run(kafka_bootstrap, filled, path, "get", "user-008")
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout) == {"n": -8}

    entry = orjson.loads(run(kafka_bootstrap, filled, path, "get", "--entry", "user-003").stdout)
    assert entry["key"] == "user-003" and entry["value"] == {"n": 3}
    assert entry["partition"] in (0, 1, 2) and entry["offset"] >= 0 and entry["timestamp"] > 0

    deleted = run(kafka_bootstrap, filled, path, "get", "user-007")
    assert deleted.exit_code == 1
    assert deleted.stdout == "" and "not found" in deleted.stderr


def test_scan_goes_past_a_value_that_is_not_json_names_it_and_exits_1(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", {"n": 1}), ("b", {"n": 2})])
    produce_raw(kafka_bootstrap, topic, b"bad", b"not json {")  # offset 2
    produce(kafka_bootstrap, topic, [("c", {"n": 3}), ("d", {"n": 4})])
    result = run(kafka_bootstrap, topic, tmp_path / "s", "scan")
    assert result.exit_code == 1, result.output
    assert [orjson.loads(line) for line in result.stdout.splitlines()] == [
        {"key": k, "value": {"n": n}} for k, n in [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    ]
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 1, result.stderr
    assert f"key 'bad' in topic {topic!r} partition 0 offset 2: not valid JSON" in skipped[0]
    assert "Traceback" not in result.output


def test_scan_filters(kafka_bootstrap: str, filled: str, tmp_path: Path) -> None:
    path = tmp_path / "s"

    def scan(*args: str) -> list[tuple[str, object]]:
        result = run(kafka_bootstrap, filled, path, "scan", *args)
        assert result.exit_code == 0, result.output
        lines = [orjson.loads(line) for line in result.stdout.splitlines()]
        return [(line["key"], line["value"]) for line in lines]

    everything = scan()
    assert len(everything) == 54
    assert [k for k, _ in everything] == sorted(k for k, _ in everything)
    assert ("user-008", {"n": -8}) in everything and "user-007" not in dict(everything)

    assert [k for k, _ in scan("--prefix", "zone-")] == [f"zone-{i}" for i in range(5)]
    assert [k for k, _ in scan("--start", "user-040", "--end", "user-043")] == [
        "user-040",
        "user-041",
        "user-042",
    ]
    assert [k for k, _ in scan("--prefix", "zone-", "--reverse", "--limit", "2")] == [
        "zone-4",
        "zone-3",
    ]
    assert scan("--prefix", "nobody-") == []


def test_count_and_status(kafka_bootstrap: str, filled: str, tmp_path: Path) -> None:
    path = tmp_path / "s"
    counted = run(kafka_bootstrap, filled, path, "count")
    assert counted.exit_code == 0, counted.output
    assert counted.stdout.strip() == "54"

    text = run(kafka_bootstrap, filled, path, "status")
    assert text.exit_code == 0, text.output
    assert "state:          running" in text.stdout
    assert "keys:           54" in text.stdout
    assert "lag:            0 records" in text.stdout
    assert "layout version: 1" in text.stdout

    report = orjson.loads(run(kafka_bootstrap, filled, path, "status", "--json").stdout)
    assert report["key_count"] == 54
    assert sum(report["position"].values()) == 57
    assert set(report["position"]) == {"0", "1", "2"}
    assert report["last_restore_at"] is not None


def test_uncompacted_topic_is_refused_clearly(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1, compact=False)
    produce(kafka_bootstrap, topic, [("a", {"v": 1})])
    refused = run(kafka_bootstrap, topic, tmp_path / "s", "count")
    one_line_error(refused, "not compact", "cleanup.policy=compact", "--allow-uncompacted")
    assert "allow_uncompacted=True" not in refused.output  # the CLI names its flag

    accepted = run(kafka_bootstrap, topic, tmp_path / "s", "count", "--allow-uncompacted")
    assert accepted.exit_code == 0, accepted.output
    assert accepted.stdout.strip() == "1"


def test_restoring_a_locked_store_is_a_clear_error(
    kafka_bootstrap: str, filled: str, tmp_path: Path
) -> None:
    # Queries answer read-only beside a running store; a restore would need to write.
    path = tmp_path / "s"
    with GlobalStore(filled, kafka_bootstrap, path):
        result = run(kafka_bootstrap, filled, path, "restore")
    one_line_error(result, "is in use by another", "use another --path")  # CliRunner: this process


def test_unreachable_broker_is_a_clear_error(tmp_path: Path) -> None:
    with closed_port() as port:
        nowhere = f"127.0.0.1:{port}"
        result = run(nowhere, "t", tmp_path / "s", "count", "--timeout", "2")
    one_line_error(result, f"no Kafka broker answered at {nowhere}", "globalstore kafka start")


def test_a_missing_topic_is_a_clear_error(kafka_bootstrap: str, tmp_path: Path) -> None:
    result = run(kafka_bootstrap, "no-such-topic", tmp_path / "s", "get", "k")
    one_line_error(result, "'no-such-topic' does not exist", "check the topic's name")


def test_a_bad_flag_value_is_a_usage_error(tmp_path: Path) -> None:
    result = run("127.0.0.1:1", "t", tmp_path / "s", "scan", "--limit", "many")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Invalid value for '--limit'" in result.stderr


def test_bad_kafka_config_is_a_usage_error(tmp_path: Path) -> None:
    result = run("127.0.0.1:1", "t", tmp_path / "s", "count", "--kafka-config", "no-equals")
    assert result.exit_code == 2
    assert "expected KEY=VALUE" in result.stderr


def test_kafka_config_reaches_the_client(kafka_bootstrap: str, filled: str, tmp_path: Path):
    # An unknown librdkafka property is rejected by the client: proof the setting got there.
    result = run(
        kafka_bootstrap, filled, tmp_path / "s", "count", "--kafka-config", "bogus.setting=1"
    )
    assert result.exit_code != 0
    assert "bogus.setting" in result.output


def test_progress_bar_on_a_terminal() -> None:
    out = io.StringIO()
    bar = ProgressBar(out, tty=True)
    bar.on_restore_start("t", {0: 0, 1: 10}, {0: 100, 1: 110})
    bar.last_shown = 0.0  # let the next batch redraw at once
    bar.on_batch_restored("t", {0: 50, 1: 60}, 100)
    bar.on_restore_end("t", 200, 2.0)
    text = out.getvalue()
    assert "restoring t: 200 records to read" in text
    assert "\r[" + "#" * 15 + "-" * 15 + "] 100/200 (50%)" in text
    assert "records/s ETA 0:00:0" in text
    assert text.endswith("restored 200 records in 2.0s (100 records/s)\n")


def test_status_offline_reads_the_store_files(
    kafka_bootstrap: str, filled: str, tmp_path: Path
) -> None:
    path = tmp_path / "s"
    assert run(kafka_bootstrap, filled, path, "restore").exit_code == 0
    with GlobalStore(filled, kafka_bootstrap, path):  # running beside it: no lock conflict
        offline = run(kafka_bootstrap, filled, path, "status", "--offline")
    assert offline.exit_code == 0, offline.output
    assert "state:          offline" in offline.stdout
    assert "keys:           54" in offline.stdout and "lag:            unknown" in offline.stdout
    assert "last restore:   never" not in offline.stdout

    with closed_port() as port:
        nowhere = f"127.0.0.1:{port}"
        fallback = run(nowhere, filled, path, "status", "--json", "--timeout", "2")
    assert fallback.exit_code == 0, fallback.output
    assert f"no Kafka broker answered at {nowhere}" in fallback.stderr
    assert "own files" in fallback.stderr
    report = orjson.loads(fallback.stdout)
    assert report["state"] == "offline" and report["key_count"] == 54
    assert sum(report["position"].values()) == 57 and report["last_restore_at"] is not None


def test_status_offline_without_a_store_is_a_clear_error(tmp_path: Path) -> None:
    result = run("127.0.0.1:1", "t", tmp_path / "none", "status", "--offline")
    one_line_error(result, "no store at")


def test_queries_on_a_directory_a_running_store_holds_answer_read_only(
    kafka_bootstrap: str, filled: str, tmp_path: Path
) -> None:
    path = tmp_path / "s"
    with GlobalStore(filled, kafka_bootstrap, path):  # an application holding the directory
        got = run(kafka_bootstrap, filled, path, "get", "user-008")
        assert got.exit_code == 0, got.output
        assert orjson.loads(got.stdout) == {"n": -8}
        assert "read-only" in got.stderr
        scanned = run(kafka_bootstrap, filled, path, "scan", "--prefix", "zone-")
        assert [orjson.loads(line)["key"] for line in scanned.stdout.splitlines()] == [
            f"zone-{i}" for i in range(5)
        ]
        counted = run(kafka_bootstrap, filled, path, "count")
        assert counted.stdout.strip() == "54", counted.output
        status = run(kafka_bootstrap, filled, path, "status", "--json")
        assert orjson.loads(status.stdout)["key_count"] == 54


def test_converters_by_name_answer_in_the_current_format(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", {"i": 1})])
    produce(kafka_bootstrap, topic, [("b", {"id": 2, "v": 2})], value_format=2)
    chain = ["--converter", "tests.value_formats:v1_to_v2"]
    chain += ["--converter", "tests.value_formats:v2_to_v3"]
    result = run(kafka_bootstrap, topic, tmp_path / "s", "scan", *chain)
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [line["value"] for line in lines] == [v3(1), v3(2)], lines
    status = run(kafka_bootstrap, topic, tmp_path / "s", "status", *chain)
    assert status.exit_code == 0 and "\nmigration:" in status.stdout, status.output


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("tests.value_formats", "expected pkg.module:function"),
        ("tests.no_such_module:f", "cannot import 'tests.no_such_module'"),
        ("tests.value_formats:nope", "has no function 'nope'"),
    ],
)
def test_a_converter_that_cannot_be_found_is_a_usage_error(
    tmp_path: Path, spec: str, says: str
) -> None:
    result = CliRunner().invoke(
        main, ["get", "--topic", "t", "--path", str(tmp_path), "--converter", spec, "k"]
    )
    assert result.exit_code == 2 and says in result.output, result.output


def by_kind(key: str, value: object) -> str:
    return key.partition("-")[0]


def test_dropping_an_index_takes_redefine(
    kafka_bootstrap: str, filled: str, tmp_path: Path
) -> None:
    """A command that writes without the store's index refuses and drops nothing (one that
    reads answers from the store's files); with --redefine it drops the index and answers."""
    indexed = ["--index", f"by_kind={__name__}:by_kind"]
    assert run(kafka_bootstrap, filled, tmp_path / "s", "count", *indexed).stdout == "54\n"

    refused = run(kafka_bootstrap, filled, tmp_path / "s", "restore")
    one_line_error(refused, "would discard index 'by_kind' version 1 (not given)", "--redefine")
    read = run(kafka_bootstrap, filled, tmp_path / "s", "count")  # reads need no function
    assert read.stdout == "54\n" and "answering read-only" in read.output, read.output
    kept = run(kafka_bootstrap, filled, tmp_path / "s", "status", *indexed)
    assert "by_kind v1 ready, 54 entries" in kept.stdout, kept.output

    redefined = run(kafka_bootstrap, filled, tmp_path / "s", "count", "--redefine")
    assert redefined.stdout == "54\n", redefined.output
    status = run(kafka_bootstrap, filled, tmp_path / "s", "status")
    assert status.exit_code == 0 and "by_kind" not in status.stdout, status.output
