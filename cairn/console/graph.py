"""A workflow's graph laid out for an SVG: nodes in columns by their distance from the
start (breadth first), edges between them, each node with the run's state of it. Drawn
with attributes only (x, y, class), so the page needs no inline style."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COLUMN = 170
ROW = 56
WIDTH = 140
HEIGHT = 34


@dataclass(frozen=True)
class Box:
    name: str
    kind: str
    state: str
    x: int
    y: int


@dataclass(frozen=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int
    label: str


@dataclass(frozen=True)
class Graph:
    boxes: list[Box]
    edges: list[Edge]
    width: int
    height: int
    box_width: int = WIDTH
    box_height: int = HEIGHT


def layout(definition: Any, states: Mapping[str, str]) -> Graph:
    """``definition``'s nodes, placed; ``states``: node -> the run's status of it."""
    nodes = definition.nodes
    depth: dict[str, int] = {definition.start: 0}
    queue = deque([definition.start])
    while queue:
        name = queue.popleft()
        for _label, target in nodes[name].targets():
            if target in nodes and target not in depth:
                depth[target] = depth[name] + 1
                queue.append(target)
    for name in nodes:  # unreachable from the start (a compensation): last column
        depth.setdefault(name, max(depth.values()) + 1)
    rows: dict[int, int] = {}
    place: dict[str, tuple[int, int]] = {}
    for name in sorted(nodes, key=lambda n: (depth[n], list(nodes).index(n))):
        row = rows.get(depth[name], 0)
        rows[depth[name]] = row + 1
        place[name] = (10 + depth[name] * COLUMN, 10 + row * ROW)
    boxes = [
        Box(
            name,
            getattr(nodes[name], "kind", "node"),
            states.get(name, "not_reached"),
            *place[name],
        )
        for name in nodes
    ]
    edges = []
    for name, node in nodes.items():
        x, y = place[name]
        for label, target in node.targets():
            if target in place:
                tx, ty = place[target]
                edges.append(Edge(x + WIDTH, y + HEIGHT // 2, tx, ty + HEIGHT // 2, label))
    width = 20 + (max(depth.values()) + 1) * COLUMN
    height = 20 + max(rows.values()) * ROW
    return Graph(boxes, edges, width, height)
