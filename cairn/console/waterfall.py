"""A run's steps as a waterfall: one bar per step, from when it began to when it ended,
on the run's time axis (SVG attributes only; no inline style)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WIDTH = 640  # the bars' area, in SVG units
ROW = 22


@dataclass(frozen=True)
class Bar:
    label: str
    phase: str
    status: str
    x: float
    width: float
    y: int
    seconds: float
    marks: str


@dataclass(frozen=True)
class Waterfall:
    bars: list[Bar]
    span_s: float
    height: int
    width: int = WIDTH


def bars(steps: Sequence[Mapping[str, Any]], started: float, updated: float) -> Waterfall:
    """One bar per step of ``steps`` (``GET /v1/runs/{id}/history``'s), placed between
    the run's start and its last change."""
    ends = [float(step["at"]) for step in steps]
    span = max([updated, *ends]) - started or 1.0
    drawn = []
    for index, step in enumerate(steps):
        seconds = float(step.get("duration_s") or 0.0)
        end = float(step["at"]) - started
        begin = max(0.0, end - seconds)
        x = WIDTH * begin / span
        drawn.append(
            Bar(
                f"{step['node']} #{step['iteration']}"
                + (f" try {step['attempt']}" if step.get("attempt", 1) > 1 else ""),
                str(step.get("phase", "run")),
                str(step.get("status", "")),
                round(x, 1),
                round(max(2.0, WIDTH * (end - begin) / span), 1),
                index * ROW,
                round(seconds, 3),
                " ".join(step.get("marks") or ()),
            )
        )
    return Waterfall(drawn, round(span, 3), max(ROW, len(drawn) * ROW))
