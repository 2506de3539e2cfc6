"""What the demo found (`DemoResult`), what contradicts the expectation, and the printout."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from globalstore.demo.instance import InstanceReport
from pipelines.metrics import RunSummary

__all__ = ["CourierCheck", "DemoResult", "render_summary"]


@dataclass(frozen=True)
class CourierCheck:
    """The couriers topic as a restored store holds it, and the expectation's digest."""

    topic: str
    count: int
    digest: str
    expected: str  # content digest of the courier figures computed in plain Python

    @property
    def as_expected(self) -> bool:
        """Whether the store's digest is the one computed in plain Python."""
        return self.digest == self.expected


@dataclass(frozen=True)
class DemoResult:
    """Everything the demo measured, and the problems it found in it."""

    produced: int
    bad: int
    dead_letters: int
    expected_active: int
    pipeline: RunSummary
    instances: tuple[InstanceReport, ...]
    couriers: CourierCheck
    timings: tuple[tuple[str, float], ...]  # (step, seconds) in order

    def problems(self) -> list[str]:
        """What contradicts the expectation; empty when the demo succeeded."""
        found = []
        if len({report.digest for report in self.instances}) != 1:
            found.append("the instances hold different content (their digests differ)")
        for number, report in enumerate(self.instances, 1):
            if report.count != self.expected_active:
                found.append(
                    f"instance {number} holds {report.count} orders, "
                    f"expected {self.expected_active}"
                )
        if not self.couriers.as_expected:
            found.append(f"the courier figures in {self.couriers.topic} are not the expected ones")
        if self.dead_letters != self.bad:
            found.append(f"{self.dead_letters} dead letters for {self.bad} bad raw records")
        return found


def render_summary(result: DemoResult) -> str:
    """The demo's summary for a terminal: OK or FAILED, then each step's figures."""
    problems = result.problems()
    first = result.instances[0]
    run = result.pipeline
    lines = [
        f"globalstore demo: {'FAILED' if problems else 'OK'}",
        f"  raw events produced  {result.produced:,} ({result.bad:,} bad on purpose)",
        f"  pipeline             {run.batches} batch(es): {run.clean:,} clean, "
        f"{run.upserts:,} upserts, {run.tombstones:,} tombstones",
        f"  dead letters         {result.dead_letters:,} (end offsets of the dead-letter topic)",
        f"  active orders        {result.expected_active:,} expected (plain Python, same rules)",
    ]
    for number, report in enumerate(result.instances, 1):
        lines.append(
            f"    instance {number} (pid {report.pid})  {report.count:,} orders, "
            f"sha256 {report.digest[:16]}, restored in {report.restore_seconds:.1f} s"
        )
    agree = len({report.digest for report in result.instances}) == 1
    lines.append(f"    the instances hold {'identical' if agree else 'DIFFERENT'} content")
    couriers = result.couriers
    lines.append(
        f"  courier figures      {couriers.count:,} couriers in {couriers.topic}, "
        f"{'as expected' if couriers.as_expected else 'DIFFERENT from what is expected'} "
        "(plain Python, same rules)"
    )
    lines.append("  sample queries (instance 1)")
    for key, value in first.samples.items():
        lines.append(f"    get({key!r}) -> {orjson.dumps(value).decode()}")
    lines.append("  elapsed")
    for number, (title, seconds) in enumerate(result.timings, 1):
        lines.append(f"    [{number}] {title:<58} {seconds:6.1f} s")
    lines.append(f"    {'total':<62} {sum(s for _, s in result.timings):6.1f} s")
    lines.extend(f"  PROBLEM: {problem}" for problem in problems)
    return "\n".join(lines)
