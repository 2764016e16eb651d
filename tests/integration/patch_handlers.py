"""Handlers for the patch marker tests: ``price`` rounds an amount to a whole total.

The fix (round half up, where the code before it rounds half to even: 2.5 -> 2) is
deployed in a process whose environment sets ``PRICING_FIX=1`` — as a new build of this
module would be: a process without it runs the code from before the fix, which never
asks ``ctx.patched``. Each visit appends the path it took to ``paths``."""

from __future__ import annotations

import os
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

FIX = "PRICING_FIX"
PATCH = "fix-rounding"


def deployed() -> bool:
    return os.environ.get(FIX) == "1"


def price(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    amount = Decimal(str(state["amount"]))
    if deployed() and ctx.patched(PATCH):
        total, path = int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP)), "new"
    else:
        total, path = round(amount), "old"
    return {"total": int(total), "paths": [*state.get("paths", []), path]}


async def price_async(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``price`` as an ``async def`` handler: ``ctx.patched`` is the same there."""
    return price(ctx, state)
