"""Importable handlers and guards for decider tests (workers find code by import path)."""

from __future__ import annotations

from typing import Any

from cairn import PermanentError


def noop(ctx: Any, state: dict[str, Any]) -> None:
    return None


def undo(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"undone": [*state.get("undone", []), "x"]}


def by_flag(state: dict[str, Any]) -> bool:
    return bool(state.get("flag"))


def by_color(state: dict[str, Any]) -> str:
    return str(state.get("color", "none"))


def explode(state: dict[str, Any]) -> bool:
    raise RuntimeError("guard blew up")


def refuse(ctx: Any, state: dict[str, Any]) -> None:
    raise PermanentError("refused")


async def awaiting_noop(ctx: Any, state: dict[str, Any]) -> None:
    """An async handler: awaited on a worker's loop, so never carried in a group."""
