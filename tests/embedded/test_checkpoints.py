"""An async checkpoint inside a node, in this process on SQLite: it saves what there was
when it was asked, its commit made on a thread while the node's other coroutines go on.
The rest of checkpoints: tests/unit/test_checkpoints.py."""

from __future__ import annotations

import asyncio

from cairn.store.sql import Store
from cairn.testing.store_rows import started
from tests.unit.test_checkpoints import _context, _state


def test_an_async_checkpoint_saves_what_there_was_when_it_was_asked(store: Store) -> None:
    run_id, key, _at = started(store)
    ctx = _context(store, key, state=_state(run_id))

    async def meanwhile() -> None:
        ctx.scratch["turn"] = 2  # another coroutine goes on while the commit is made

    async def loop() -> int:
        ctx.scratch["turn"] = 1
        saved, _ = await asyncio.gather(ctx.checkpoint_async(), meanwhile())
        return saved

    assert asyncio.run(loop()) == 1
    with store.reading() as tx:
        found = tx.checkpoint_of(key)
    assert found is not None and found.context["scratch"] == {"turn": 1}
