"""`globalstore demo`: the whole system end to end on the embedded default.

A local Kafka broker (temporary directory, free port) -> a generated raw order stream
(pipelines.orders.generator) -> the orders and couriers pipelines in batch mode (Spark
local[*], the code `globalstore pipeline run` uses) -> two GlobalStore instances in two
processes, each restoring the orders topic, and one restoring the couriers topic -> a
summary that checks them against each other and against the active orders and courier
figures computed here in plain Python.

Progress goes to stderr, the summary to stdout. Everything started here is stopped here,
on error and Ctrl-C too.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from globalstore.demo.instance import content_digest, restore_and_report
from globalstore.demo.report import CourierCheck, DemoResult
from globalstore.follow.topic import end_offsets
from globalstore.localkafka import LocalKafka, free_port
from pipelines import skeleton
from pipelines.couriers.reference import ExpectedCouriers
from pipelines.metrics import RunSummary
from pipelines.orders.generator import StreamShape, generate, produce
from pipelines.orders.reference import ExpectedOrders
from pipelines.registry import get_pipeline
from pipelines.session import build_session
from pipelines.spec import Pipeline
from pipelines.topics import ensure_topic, ensure_topics

__all__ = [
    "BROKER_HEAP",
    "BROKER_START_TIMEOUT_S",
    "INSTANCES",
    "PIPELINES",
    "SPAWN",
    "STEPS",
    "DemoOptions",
    "Steps",
    "T",
    "run_demo",
    "run_pipelines",
    "sample_keys",
]

PIPELINES = ("orders", "couriers")  # both read the same raw topic
STEPS = 6
INSTANCES = 2
BROKER_HEAP = "512m"  # Spark and two stores share the machine; the demo's topics are small
BROKER_START_TIMEOUT_S = 180.0  # the first run resolves Kafka's jars from Maven Central
# Spawned, not forked: a fork would copy librdkafka threads and Spark's gateway state, and a
# fresh interpreter is what a separately deployed instance is.
SPAWN = multiprocessing.get_context("spawn")
T = TypeVar("T")


@dataclass(frozen=True)
class DemoOptions:
    """The knobs of `globalstore demo`."""

    orders: int = 3000
    seed: int = 7
    partitions: int = 3
    port: int | None = None  # None: a free port, so a broker the user runs is never touched
    keep_dir: bool = False


@dataclass
class Steps:
    """Numbered progress lines, and how long each step took."""

    out: TextIO
    timings: list[tuple[str, float]] = field(default_factory=list)

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        """Print the step's numbered title, run the block, and record how long it took."""
        print(f"[{len(self.timings) + 1}/{STEPS}] {title} ...", file=self.out, flush=True)
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings.append((title, time.monotonic() - started))


def run_demo(options: DemoOptions, progress: TextIO = sys.stderr) -> DemoResult:
    """Run the demo end to end in a throw-away directory, reporting progress to `progress`."""
    work = Path(tempfile.mkdtemp(prefix="globalstore-demo-"))
    try:
        return _run_in(work, options, Steps(progress))
    finally:
        if options.keep_dir:
            print(f"kept {work}", file=progress)
        else:
            shutil.rmtree(work, ignore_errors=True)


def _run_in(work: Path, options: DemoOptions, steps: Steps) -> DemoResult:
    orders, couriers = specs = [get_pipeline(name) for name in PIPELINES]
    broker = LocalKafka(port=options.port or free_port(), data_dir=work / "kafka", heap=BROKER_HEAP)
    try:
        with steps.step(f"starting local Kafka on port {broker.port}"):
            bootstrap = broker.start(timeout=BROKER_START_TIMEOUT_S)
        with steps.step("creating the topics"):
            _create_topics(bootstrap, specs, options.partitions)
        with steps.step(f"generating {options.orders} orders and producing their events"):
            records = generate(StreamShape(orders=options.orders), seed=options.seed)
            produced = produce(bootstrap, orders.source_topic, records)
        with steps.step("running the orders and couriers pipelines (Spark, batch mode)"):
            summary, _ = _run_pipelines_in_child(specs, bootstrap, work, steps.out)
        expected = ExpectedCouriers().run(records)
        samples = sample_keys(expected.orders)
        with steps.step(f"restoring {INSTANCES} GlobalStore instances in separate processes"):
            calls = [
                (orders.target_topic, bootstrap, work / f"store-{n}", samples)
                for n in range(1, INSTANCES + 1)
            ]
            calls.append((couriers.target_topic, bootstrap, work / "store-couriers", ()))
            *reports, courier_report = _in_processes(restore_and_report, calls)
        with steps.step("checking the results"):
            dead_letters = sum(end_offsets(bootstrap, orders.dead_letter_topic).values())
    finally:
        broker.stop()
    return DemoResult(
        produced=produced,
        bad=sum(record.bad_reason is not None for record in records),
        dead_letters=dead_letters,
        expected_active=len(expected.orders.active()),
        pipeline=summary,
        instances=tuple(reports),
        couriers=CourierCheck(
            topic=couriers.target_topic,
            count=courier_report.count,
            digest=courier_report.digest,
            expected=content_digest(sorted(expected.figures().items())),
        ),
        timings=tuple(steps.timings),
    )


def _create_topics(bootstrap: str, specs: Sequence[Pipeline], partitions: int) -> None:
    """The raw topic here; the compacted targets and the dead-letter topics as the job would."""
    for spec in specs:
        ensure_topic(bootstrap, spec.source_topic, partitions)
        ensure_topics(bootstrap, spec.source_topic, spec.target_topic, spec.dead_letter_topic)


def _run_pipelines_in_child(
    specs: Sequence[Pipeline], bootstrap: str, work: Path, progress: TextIO
) -> list[RunSummary]:
    runs = [
        (
            spec.name,
            skeleton.RunOptions(
                bootstrap_servers=bootstrap,
                source_topic=spec.source_topic,
                target_topic=spec.target_topic,
                dead_letter_topic=spec.dead_letter_topic,
                checkpoint_dir=work / "checkpoints" / spec.name,
            ),
        )
        for spec in specs
    ]
    log = work / "spark.log"
    try:
        return _in_processes(run_pipelines, [(runs, log)])[0]
    except Exception:
        print(f"a pipeline failed; the end of Spark's output ({log}):", file=progress)
        print(_tail(log), file=progress)
        raise


def run_pipelines(runs: Sequence[tuple[str, skeleton.RunOptions]], log: Path) -> list[RunSummary]:
    """What `globalstore pipeline run NAME` does, for each (NAME, options) in turn, for a
    child process (one Spark session for all).

    In a child because PySpark's gateway JVM outlives spark.stop(): it only exits with the
    Python process that launched it. Spark's chatter (Ivy, log4j, warnings) goes to `log`
    so the demo's progress stays readable; the JVM inherits the redirected stderr.
    """
    with log.open("ab") as sink:
        os.dup2(sink.fileno(), sys.stderr.fileno())
    spark = build_session()
    try:
        return [skeleton.run(spark, get_pipeline(name), options) for name, options in runs]
    finally:
        spark.stop()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


def _in_processes(function: Callable[..., T], calls: Sequence[tuple[Any, ...]]) -> list[T]:
    """Call `function` once per argument tuple, each in its own spawned process, all at once;
    every process has exited on return. (One pool per call: a shared pool could hand two
    calls to the same process.)"""
    with ExitStack() as stack:
        pools = [
            stack.enter_context(ProcessPoolExecutor(max_workers=1, mp_context=SPAWN)) for _ in calls
        ]
        futures = [pool.submit(function, *args) for pool, args in zip(pools, calls, strict=True)]
        return [future.result() for future in futures]


def sample_keys(expected: ExpectedOrders) -> tuple[str, ...]:
    """Two active orders and one that ended (its key must be gone from every store)."""
    live = sorted(expected.active())
    return tuple(dict.fromkeys([*live[:1], *live[-1:], *expected.ended()[:1]]))
