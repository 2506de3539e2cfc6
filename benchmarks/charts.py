"""Pictures of benchmark results, for docs/performance.md: a person should see the standing at
a glance. matplotlib draws to PNG files without a display (the Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt

OURS = "#1f6feb"  # the project's bars; everything else is a baseline or a peer
OTHERS = "#8b949e"
SERIES = (OURS, "#d1242f", "#2da44e", "#8250df")  # lines of one chart, the first ours


def bars(
    path: Path,
    title: str,
    values: Sequence[tuple[str, float]],
    unit: str,
    ours: Sequence[str],
    target: float | None = None,
) -> None:
    """Horizontal bars, one per (label, value); the labels in `ours` stand out."""
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(values) + 1.4))
    labels = [label for label, _ in values]
    numbers = [value for _, value in values]
    colours = [OURS if label in ours else OTHERS for label in labels]
    ax.barh(labels, numbers, color=colours)
    ax.invert_yaxis()  # first value on top
    for y, value in enumerate(numbers):
        ax.text(value, y, f" {value:,.0f}", va="center", fontsize=9)
    if target is not None:
        ax.axvline(target, color="#d29922", linestyle="--", label=f"target {target:,.0f}")
        ax.legend(loc="lower right", fontsize=9)
    ax.set_xlabel(unit)
    ax.xaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))  # wide labels: no overlap
    ax.set_title(title, fontsize=11, loc="left")
    ax.set_xlim(0, max([*numbers, target or 0]) * 1.2)
    _save(fig, path)


def distribution(
    path: Path, title: str, samples: Mapping[str, Sequence[float]], unit: str, scale: float
) -> None:
    """Cumulative distribution of each series (values multiplied by `scale`), log x-axis."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, values in samples.items():
        xs = sorted(v * scale for v in values)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", label=f"{label} (n={len(xs)})")
    ax.axhline(0.99, color=OTHERS, linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel(unit)
    ax.set_ylabel("fraction of samples at or below")
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    _save(fig, path)


def _save(fig: plt.Figure, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def loglog(
    path: Path,
    title: str,
    xs: Sequence[float],
    series: Mapping[str, Sequence[float]],
    unit: str,
    target: float | None = None,
) -> None:
    """One line per series against xs (keys, instances), both axes logarithmic; points that
    failed to measure (nan) are left out."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for colour, (label, ys) in zip(SERIES, series.items(), strict=False):
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if y == y and y > 0]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=label, color=colour)  # fmt: skip
    if target is not None:
        ax.axhline(target, color="#d29922", linestyle="--", label=f"target {target:,g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), [f"{x:,.0f}" for x in xs])
    ax.minorticks_off()
    # 1-2-5 steps with plain numbers: a log axis over less than a decade has no label else.
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,g}"))
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=11, loc="left")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9)
    _save(fig, path)
