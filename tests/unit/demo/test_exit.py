"""`globalstore demo` exits non-zero when what it found contradicts the expectation (the run
itself is replaced here: tests/integration/test_demo.py runs it for real)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from globalstore.cli import main
from globalstore.demo import run as demo_run
from globalstore.demo.instance import InstanceReport
from globalstore.demo.report import CourierCheck, DemoResult
from pipelines.metrics import RunSummary


def _result(
    digests: tuple[str, str], counts: tuple[int, int], dead_letters: int, couriers: str = "c"
) -> DemoResult:
    instances = tuple(
        InstanceReport(pid=1, count=n, digest=d, samples={}, restore_seconds=0.1)
        for d, n in zip(digests, counts, strict=True)
    )
    return DemoResult(
        produced=100,
        bad=2,
        dead_letters=dead_letters,
        expected_active=10,
        pipeline=RunSummary(batches=1, clean=98, dead_lettered=2, upserts=10, tombstones=0),
        instances=instances,
        couriers=CourierCheck(topic="couriers.current", count=3, digest=couriers, expected="c"),
        timings=(("all", 1.0),),
    )


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        (_result(("a", "b"), (10, 10), 2), "the instances hold different content"),
        (_result(("a", "a"), (10, 9), 2), "instance 2 holds 9 orders, expected 10"),
        (_result(("a", "a"), (10, 10), 1), "1 dead letters for 2 bad raw records"),
        (
            _result(("a", "a"), (10, 10), 2, couriers="x"),
            "the courier figures in couriers.current are not the expected ones",
        ),
    ],
)
def test_a_contradiction_fails_the_demo(
    monkeypatch: pytest.MonkeyPatch, result: DemoResult, problem: str
) -> None:
    monkeypatch.setattr(demo_run, "run_demo", lambda options: result)
    outcome = CliRunner().invoke(main, ["demo"])
    assert outcome.exit_code == 1
    assert outcome.output.startswith("globalstore demo: FAILED")
    assert f"PROBLEM: {problem}" in outcome.output


def test_an_agreeing_run_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_run, "run_demo", lambda options: _result(("a", "a"), (10, 10), 2))
    outcome = CliRunner().invoke(main, ["demo"])
    assert outcome.exit_code == 0, outcome.output
    assert outcome.output.startswith("globalstore demo: OK") and "PROBLEM" not in outcome.output
