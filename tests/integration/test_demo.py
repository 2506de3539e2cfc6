"""`globalstore demo` for real: its own broker, Spark, two store processes, nothing left behind.

The demo runs as `make demo` runs it (the installed console script), in a session of its own
and with TMPDIR pointing into the test's directory, so whatever it started can be found
afterwards by session id (Python children, Spark's JVM) or by command line (the broker, which
runs in a session of its own inside the demo's temporary directory).
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipelines.couriers.reference import ExpectedCouriers
from pipelines.orders.generator import StreamShape, generate
from pipelines.orders.reference import ExpectedOrders
from tests.waiting import eventually

pytestmark = pytest.mark.spark

ORDERS = 300
RDKAFKA_LOG_LINE = re.compile(r"%\d\|\d+\.\d+\|[A-Z]+\|")
SEED = 3
TIMEOUT_S = 300  # a safety net only: about 60-100 s on the loaded 2-core box


def number(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.mark.timeout(TIMEOUT_S + 120)  # room for the Ctrl-C cleanup below
def test_demo_runs_end_to_end_and_leaves_nothing_running(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [str(Path(sys.executable).parent / "globalstore"), "demo",
         "--orders", str(ORDERS), "--seed", str(SEED), "--partitions", "2"],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = demo.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C: the demo stops its broker and children
        demo.communicate(timeout=60)
        raise
    assert demo.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"

    assert [line[:5] for line in err.splitlines() if line.startswith("[")] == [
        f"[{n}/6]" for n in range(1, 7)
    ]
    assert out.startswith("globalstore demo: OK")
    # librdkafka's own log lines ("%4|1700000000.123|GETPID|rdkafka#producer-1| ...") go
    # through Python logging, never raw to the terminal.
    raw_client_lines = [line for line in (out + err).splitlines() if RDKAFKA_LOG_LINE.match(line)]
    assert raw_client_lines == []
    records = generate(StreamShape(orders=ORDERS), seed=SEED)  # what the demo produced
    expected = ExpectedOrders()
    expected.run(records)
    instances = re.findall(r"instance \d \(pid (\d+)\)\s+([\d,]+) orders, sha256 (\w+)", out)
    assert len(instances) == 2
    assert instances[0][0] != instances[1][0]  # two processes
    active = expected.active()
    assert [number(count) for _, count, _ in instances] == [len(active)] * 2
    # Each instance's content is the expected orders: the digest the demo documents (sha256
    # over key, NUL, value as JSON with sorted fields, newline; in key order), computed here
    # from the plain-Python expectation.
    want = expected_digest(active)[:16]
    assert [digest for _, _, digest in instances] == [want, want]
    dead_letters = number(re.findall(r"dead letters\s+([\d,]+)", out)[0])
    assert dead_letters == sum(r.bad_reason is not None for r in records) > 0
    samples = re.findall(r"get\('(o-\d+)'\) -> (.+)", out)
    assert samples, out
    assert {key: orjson.loads(value) for key, value in samples} == {
        key: active.get(key) for key, _ in samples
    }
    assert any(value == "null" for _, value in samples)  # an ended order is gone
    couriers = ExpectedCouriers().run(records).figures()
    assert (
        f"courier figures      {len(couriers):,} couriers in couriers.current, as expected" in out
    )

    assert list(tmp_path.glob("globalstore-demo-*")) == []  # the temporary directory
    # Spark's gateway JVM ends after its Python parent, not always before the demo exits.
    leftover = lambda: leftover_processes(demo.pid, str(tmp_path))  # noqa: E731
    eventually(lambda: not leftover(), 30, leftover, interval_s=0.5)


def expected_digest(content: dict[str, Any]) -> str:
    digest = hashlib.sha256()
    for key in sorted(content):
        value = orjson.dumps(content[key], option=orjson.OPT_SORT_KEYS)
        digest.update(key.encode() + b"\0" + value + b"\n")
    return digest.hexdigest()


def leftover_processes(session: int, marker: str) -> list[str]:
    """Command lines of live processes in `session`, or naming `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue  # not a process, or it ended meanwhile
        state, _ppid, _pgrp, sid = stat.rsplit(")", 1)[1].split()[:4]
        if state != "Z" and (int(sid) == session or marker in cmdline):
            found.append(cmdline)
    return found
