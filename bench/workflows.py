"""The benchmark's workflow and the plain Celery baseline's tasks."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import httpx
import redis
from celery import Celery

from cairn.definitions.builder import Workflow
from cairn.model.failures import TransientError

STEPS = 10


def noop(ctx: Any, state: dict[str, Any]) -> None:
    return None


chain10 = Workflow("bench_chain10", version=1)
for _index in range(1, STEPS + 1):
    chain10.task(f"s{_index}", noop, next=f"s{_index + 1}" if _index < STEPS else "done")
chain10.end("done")

# The same chain without node timeouts (node_timeout: none): no timer armed and disarmed
# with each step, to show what the default timeout costs.
chain10_untimed = Workflow("bench_chain10_untimed", version=1, node_timeout="none")
for _index in range(1, STEPS + 1):
    chain10_untimed.task(f"s{_index}", noop, next=f"s{_index + 1}" if _index < STEPS else "done")
chain10_untimed.end("done")

# The same chain with every other step a pure query (persist: ephemeral): each is
# committed with the durable step after it, by the worker that ran both.
chain10_ephemeral = Workflow("bench_chain10_ephemeral", version=1)
for _index in range(1, STEPS + 1):
    chain10_ephemeral.task(
        f"s{_index}",
        noop,
        next=f"s{_index + 1}" if _index < STEPS else "done",
        persist="ephemeral" if _index % 2 else "durable",
    )
chain10_ephemeral.end("done")

# -- the baseline: the same ten trivial tasks as a plain Celery chain (no durability) ----

baseline = Celery(
    "bench_baseline", broker=os.environ.get("BENCH_BROKER_URL", "memory://"), set_as_current=False
)
baseline.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    task_acks_late=True,
    worker_hijack_root_logger=False,
)
_marks: redis.Redis | None = None


@baseline.task(name="bench.step", ignore_result=True)
def step(run: int, index: int) -> None:
    """A trivial step that notes when it finished (one Redis RPUSH, for the latencies)."""
    global _marks  # noqa: PLW0603 - one connection per worker process
    if _marks is None:
        _marks = redis.Redis.from_url(os.environ["BENCH_MARKS_URL"])
    _marks.rpush("bench:marks", f"{run} {index} {time.time()}")


def slow_once(ctx: Any, state: dict[str, Any]) -> None:
    """Notes when it starts (pid, time) in the ledger; dawdles only on a first execution."""
    path = state["ledger"]
    first = not os.path.exists(path) or f"{ctx.run_id} " not in Path(path).read_text()
    with open(path, "a", encoding="utf-8") as ledger:
        ledger.write(f"{ctx.run_id} {os.getpid()} {time.time()}\n")
    if first:
        time.sleep(float(state.get("sleep_s", 60)))


recovery = Workflow("bench_recovery", version=1).task("work", slow_once, next="done").end("done")


# -- nodes that wait on a slow call (bench/async_nodes.py) ------------------------------


_async_client: httpx.AsyncClient | None = None
_sync_client: httpx.Client | None = None


async def call_async(ctx: Any, state: dict[str, Any]) -> None:
    """Awaits one slow HTTP call (the stand-in answers after its delay), on the process's
    one client, as an SDK's client is shared."""
    global _async_client  # noqa: PLW0603 - one client per process (its loop is the process's)
    if _async_client is None:
        _async_client = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=None))
    (await _async_client.get(state["url"])).raise_for_status()


def call_sync(ctx: Any, state: dict[str, Any]) -> None:
    """The same call, blocking its thread."""
    global _sync_client  # noqa: PLW0603 - one client per process
    if _sync_client is None:
        _sync_client = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=None))
    _sync_client.get(state["url"]).raise_for_status()


awaiting = Workflow("bench_await_async", version=1).task("call", call_async, next="done")
awaiting.end("done")
blocking = Workflow("bench_await_sync", version=1).task("call", call_sync, next="done")
blocking.end("done")


def flaky_call(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Fails transiently with probability ``failure_rate`` on each attempt, drawn from a
    hash of (seed, attempt): both benchmark workflows see the same injected failures."""
    digest = hashlib.sha256(f"{state['seed']}:{ctx.attempt}".encode()).digest()
    if int.from_bytes(digest[:8], "big") / 2**64 < float(state["failure_rate"]):
        raise TransientError(f"injected transient failure on attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}


with_retries = (
    Workflow("bench_with_retries", version=1)
    .task(
        "call",
        flaky_call,
        next="done",
        retry={"attempts": 5, "backoff": "0.1s", "max_delay": "1s"},
    )
    .end("done")
)
without_retries = (
    Workflow("bench_without_retries", version=1)
    .task("call", flaky_call, next="done", retry="none")  # not the default policy
    .end("done")
)


# -- a long node's turns, with and without a checkpoint after each (bench/checkpoints.py) -


async def turns(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``turns`` model turns (a ``message_bytes`` assistant message each, no call), each
    followed by a checkpoint when ``checkpoint`` is set."""
    text = "x" * int(state.get("message_bytes", 500))
    for turn in range(int(state["turns"])):
        ctx.messages.append({"role": "assistant", "content": f"{turn} {text}"})
        if state.get("checkpoint"):
            await ctx.checkpoint_async()
    return {"turns_taken": ctx.turns}


long_node = Workflow("bench_turns", version=1).task("think", turns, next="done").end("done")


# -- a streamed model call through ctx.model (bench/chunk_latency.py) ------------------


def streamed_call(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One streamed call to the model stand-in at ``MODEL_URL``, read to its end."""
    from openai import OpenAI  # noqa: PLC0415 - the dev extra

    global _model_client  # noqa: PLW0603 - one client per process
    if _model_client is None:
        _model_client = OpenAI(base_url=os.environ["MODEL_URL"] + "/v1", api_key="bench")
    model = ctx.model(_model_client)
    words = []
    with model.chat.completions.create(
        model="stand-in", messages=[{"role": "user", "content": state["ask"]}], stream=True
    ) as stream:
        for chunk in stream:
            if chunk.choices:
                words.append(chunk.choices[0].delta.content or "")
    return {"said": "".join(words)}


_model_client: Any = None
streaming = Workflow("bench_streamed", version=1).task("talk", streamed_call, next="done")
streaming.end("done")


# -- one model call per run, under a shared concurrency limit (bench/concurrency.py) ---------


def provider_call(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One call to the model stand-in at ``MODEL_URL``."""
    from openai import OpenAI  # noqa: PLC0415 - the dev extra

    global _model_client  # noqa: PLW0603 - one client per process
    if _model_client is None:
        _model_client = OpenAI(base_url=os.environ["MODEL_URL"] + "/v1", api_key="bench")
    reply = ctx.model(_model_client).chat.completions.create(
        model="stand-in", messages=[{"role": "user", "content": state["ask"]}]
    )
    return {"said": reply.choices[0].message.content}


LIMIT = 10
limited = Workflow("bench_limited", version=1).task(
    "call", provider_call, next="done", concurrency={"key": "bench-provider", "limit": LIMIT}
)
limited.end("done")
unlimited = Workflow("bench_unlimited", version=1).task("call", provider_call, next="done")
unlimited.end("done")

# -- the same call under a fleet-wide rate limit (bench/rate.py) --------------------------

RATE = 10  # requests a second: 600 a minute, never more than ten in any second
rated = Workflow("bench_rated", version=1).task(
    "call", provider_call, next="done", rate={"key": "bench-provider", "requests": f"{RATE}/s"}
)
rated.end("done")

# -- both, as a fleet shares them (bench/fleet_limits.py) -------------------------------

PER_MINUTE = 600
shared = Workflow("bench_shared_quota", version=1).task(
    "call",
    provider_call,
    next="done",
    concurrency={"key": "bench-provider", "limit": LIMIT},
    rate={"key": "bench-provider", "requests": f"{PER_MINUTE}/min"},
)
shared.end("done")


def brief_work(ctx: Any, state: dict[str, Any]) -> None:
    """A node of bench/fairness.py: ``state["work_s"]`` seconds of work."""
    time.sleep(float(state.get("work_s", 0.01)))


fair_step = Workflow("bench_fair_step", version=1).task("work", brief_work, next="done")
fair_step.end("done")
