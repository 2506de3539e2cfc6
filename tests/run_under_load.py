"""Run the test suite several times in a row on a machine kept busy by a CPU load.

    .venv/bin/python tests/run_under_load.py --runs 10 --burners 1 [-- pytest args]

Each burner is a process spinning in a tight loop at normal priority, so the suite competes
for the cores the way it does on a shared CI machine. The runs stop at the first failure;
the summary prints each run's outcome and time. The per-test timeout (pytest-timeout, set in
pyproject.toml) stays in force, so a hang fails a run instead of stalling the loop.
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import time


def burn() -> None:
    while True:
        pass


def run_suite(pytest_args: list[str]) -> tuple[int, float]:
    started = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args])
    return code, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--burners", type=int, default=1, help="busy processes (default 1)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.burners)]
    for burner in burners:
        burner.start()
    results: list[tuple[int, float]] = []
    try:
        for run in range(1, args.runs + 1):
            code, seconds = run_suite(args.pytest_args)
            results.append((code, seconds))
            print(f"run {run}/{args.runs}: exit {code} in {seconds / 60:.1f} min", flush=True)
            if code != 0:
                break
    finally:
        for burner in burners:
            burner.terminate()
    passed = sum(1 for code, _ in results if code == 0)
    print(f"{passed} of {args.runs} runs passed in a row with {args.burners} CPU burner(s)")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
