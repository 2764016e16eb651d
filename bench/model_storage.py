"""How the record of a conversation's model calls grows with its length.

    python -m bench.model_storage                  # 100 calls, 400-byte replies
    python -m bench.model_storage --calls 200 --reply-bytes 2000

An agent's n-th call sends the whole conversation so far. ``ctx.model`` records each
message once, by digest, and each call the digests it sent; recording every call's full
request instead (what a step that stores its inputs does) grows with the square. One
conversation is recorded through ``ctx.model`` against the model stand-in, on a fresh
SQLite store; printed: the bytes stored (message bodies + call rows) at 25 %, 50 % and
100 % of the calls, beside the quadratic baseline computed from the same requests.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from openai import OpenAI
from sqlalchemy import Engine, select

from cairn.model.state import RunState
from cairn.recording.calls import ModelCalls
from cairn.store.backends import store_for
from cairn.store.database import make_engine, upgrade
from cairn.store.schema import model_calls, model_messages
from cairn.testing.model_server import ModelServer, Reply
from cairn.testing.store_rows import started
from cairn.workers.context import StepContext


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def _stored(engine: Engine) -> tuple[int, int]:
    """Bytes in the record as stored (message bodies, and each call's columns), and the
    responses' share of them (which a full-request record keeps as well)."""
    with engine.connect() as connection:
        bodies = connection.execute(select(model_messages.c.body)).scalars().all()
        calls = connection.execute(
            select(model_calls.c.messages, model_calls.c.params, model_calls.c.response)
        ).all()
    responses = sum(_size(call.response) for call in calls)
    kept = sum(_size(b) for b in bodies) + sum(_size(c.messages) + _size(c.params) for c in calls)
    return kept + responses, responses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--reply-bytes", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home, ModelServer() as server:
        engine = make_engine(f"sqlite:///{Path(home) / 'cairn.db'}")
        upgrade(engine)
        store = store_for(engine)
        _run_id, key, _at = started(store)
        calls = ModelCalls(store, key, 1, 1, max_bytes=10**9, reconnect_within=0.0)
        ctx = StepContext(
            run_id=key.run_id,
            workflow="w",
            node=key.node,
            iteration=1,
            attempt=1,
            phase="run",
            state=RunState(key.run_id, "w", 1),
            model_calls=calls,
        )
        text = "x" * args.reply_bytes
        server.script(*(Reply(text=f"{n} {text}") for n in range(args.calls)))
        marks = {max(1, args.calls * share // 100): share for share in (25, 50, 100)}
        rows = []
        quadratic = 0
        with OpenAI(base_url=server.openai_base_url, api_key="t") as client:
            model = ctx.model(client)
            messages: list[dict[str, Any]] = [{"role": "user", "content": "research " + text}]
            for n in range(1, args.calls + 1):
                quadratic += _size(messages)  # the full request, recorded every call
                reply = model.chat.completions.create(model="m", messages=messages)
                messages.append({"role": "assistant", "content": reply.choices[0].message.content})
                if n in marks:
                    linear, responses = _stored(engine)
                    rows.append((n, linear, quadratic + responses))
        store.dispose()
    print(
        f"one conversation, {args.calls} calls, {args.reply_bytes}-byte replies; bytes stored\n"
        f"{'calls':>6} {'by reference':>14} {'full requests':>14} {'ratio':>7}"
    )
    for n, linear, baseline in rows:
        print(f"{n:>6} {linear:>14,} {baseline:>14,} {baseline / linear:>6.1f}x")
    (n1, l1, b1), (n2, l2, b2) = rows[0], rows[-1]
    print(
        f"\nfrom {n1} to {n2} calls: by reference x{l2 / l1:.1f} (linear: x{n2 / n1:.1f}), "
        f"full requests x{b2 / b1:.1f} (quadratic: x{(n2 / n1) ** 2:.1f})"
    )


if __name__ == "__main__":
    main()
