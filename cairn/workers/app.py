"""The Celery app: built from settings by :func:`make_celery`, configured for safety.

The broker is a doorbell, not a database: messages may be lost or duplicated, and
PostgreSQL decides what counts. So: JSON only (pickle would be remote code execution),
late acks with reject-on-worker-lost (a task dies → its message comes back), prefetch 1
(a long node does not sit on queued work), no result backend (results live in
PostgreSQL), and a visibility timeout — set the same in every place Celery reads it —
longer than any node runs.

Every worker also pings itself through the broker to notice when it stops consuming
(:mod:`cairn.workers.liveness`), and every node message carries the time it was
published, for the lease wait histogram (:mod:`cairn.lease.waits`).

``celery -A cairn.runtime`` finds the worker's app there (the composition root builds
each process's runtime and hands it to the app); ``cairn worker`` starts the same.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol
from urllib.parse import urlsplit

from celery import Celery
from celery.exceptions import InvalidTaskError, Reject
from celery.signals import worker_process_init, worker_process_shutdown
from celery.worker.strategy import default as default_strategy
from kombu.exceptions import ChannelError

from cairn import clock
from cairn.access.audit import Audit, Entry
from cairn.access.local import broker_principal
from cairn.config import Settings
from cairn.engine.batches import SubmitItem, Submitted
from cairn.errors import CairnError
from cairn.lease.waits import delivered
from cairn.model.builds import build_queue
from cairn.model.messages import NodeMessage, siblings_header
from cairn.model.principals import Principal, PrincipalKind, Role
from cairn.model.starts import Debounce, Singleton
from cairn.reconnect import is_outage
from cairn.workers import deadlines
from cairn.workers.awaiting import AwaitingNodes
from cairn.workers.deferred import DeferredAcks, Held, in_pool_process
from cairn.workers.fairness import FAIR_HEADER, PRIORITY_STEPS, Fairness
from cairn.workers.liveness import PING_TASK, Liveness
from cairn.workers.runner import HandOver
from cairn.workers.task_events import NodeFailure, NodeRequest, task_result
from cairn.workers.transport import TRANSPORT as REDIS_TRANSPORT

log = logging.getLogger(__name__)

NODE_TASK = "cairn.node"
SUBMIT_TASK = "cairn.submit"
SUBMIT_BATCH_TASK = "cairn.submit_batch"
PUBLISHED_HEADER = "cairn_published_at"  # epoch seconds, set by CeleryPublisher
# The siblings a node message carries (cairn.engine.grouping), in a header: a
# worker of an older version ignores it, and the siblings' unsent rows are relayed.
SIBLINGS_HEADER = "cairn_siblings"


class ProcessRuntime(Protocol):
    """What a worker process runs node messages and submits with (a
    :class:`cairn.runtime.Runtime`, which the composition root builds and passes in)."""

    runner: Any
    orchestrator: Any

    def close(self) -> None: ...


def make_celery(
    settings: Settings, runtime: Callable[[Celery], ProcessRuntime] | None = None
) -> Celery:
    """The Celery app. ``runtime`` builds the runtime of a worker process (once per
    process, after the fork); an app without one only publishes and inspects."""
    if settings.broker_url is None:
        raise ValueError(
            "make_celery needs CAIRN_BROKER_URL; without it cairn runs nodes in-process"
        )
    app = Celery("cairn", broker=settings.broker_url, set_as_current=False)
    _configure(app, settings)
    app.cairn_settings = settings
    app.cairn_runtime = runtime
    app.steps["consumer"].add(Liveness)
    app.steps["consumer"].add(Held)  # acks of the async nodes awaiting in its processes

    # shared=False throughout: each app owns its tasks. Celery's shared tasks would be
    # added to every app made later in the process, closing over the first one's app.
    _add_node_task(app)
    _add_submit_tasks(app)
    _add_ping_task(app)
    return app


def _add_node_task(app: Celery) -> None:
    """The task a node message runs as: the process's runner takes it from there."""

    @app.task(
        bind=True,
        name=NODE_TASK,
        ignore_result=True,
        shared=False,
        Strategy="cairn.workers.app:checked_strategy",
        # Flower tells what became of the message (cairn.workers.task_events); a node's
        # failure, raised, is logged as expected: its handler's error was logged already.
        Request=NodeRequest,
        throws=(NodeFailure,),
    )
    def run_node(task: Any, message: dict[str, Any]) -> str:
        with delivered(_published_at(task.request)):
            try:  # continued: the steps it went on with, named in its result
                runner, continued = _process_runtime(app).runner, list[str]()
                request = task.request
                handled = runner.run(
                    message,
                    continued,
                    _hand_over(app, runner, request.id),
                    getattr(request, SIBLINGS_HEADER, None),
                )
            except Exception as error:
                if is_outage(error):  # outlasted the retries: give it back, never ack
                    raise Reject(error, requeue=True) from error
                raise
        return task_result(handled, getattr(task.request, "shadow", None) or NODE_TASK, continued)


def _add_submit_tasks(app: Celery) -> None:
    """The tasks that start runs from a broker message: one, or a batch."""

    @app.task(name=SUBMIT_TASK, ignore_result=True, shared=False)
    def submit(  # noqa: PLR0917 - the task's arguments are a wire format: args or kwargs
        workflow: str,
        input: dict[str, Any] | None = None,
        request_id: str | None = None,
        namespace: str | None = None,
        version: int | None = None,
        webhook: str | None = None,
        priority: int | None = None,
        debounce: dict[str, Any] | None = None,
        singleton: dict[str, Any] | None = None,
    ) -> str | None:
        """Start a run from any Celery/kombu client (JSON), as the principal an admin
        configured (CAIRN_BROKER_SUBMIT), into its namespace (a message naming another is
        refused). There is no result backend: give a request id to find the run again
        (and to make a resent message one run). ``priority``: -5..5, higher first (a bad
        one is refused, logged, nothing started). ``debounce`` ``{key, wait, max_wait?}``
        and ``singleton`` ``{key, mode?}`` as on ``POST /v1/runs`` (docs/flow-control.md)."""
        runtime = _process_runtime(app)
        who = _submitter(app, runtime, namespace, f"a run of {workflow}")
        if who is None:
            return None
        if debounce is not None or singleton is not None:
            return _submitted_controlled(
                runtime,
                workflow,
                input or {},
                who,
                version=version,
                webhook=webhook,
                priority=priority,
                debounce=debounce,
                singleton=singleton,
            )
        item = SubmitItem(workflow, input or {}, request_id, version, webhook, priority)
        return _submitted(runtime, [item], who)[0].run_id

    @app.task(name=SUBMIT_BATCH_TASK, ignore_result=True, shared=False)
    def submit_batch(runs: list[dict[str, Any]], namespace: str | None = None) -> int:
        """Start up to 1,000 runs in one transaction (as :func:`submit`); returns how many
        were accepted."""
        runtime = _process_runtime(app)
        who = _submitter(app, runtime, namespace, f"a batch of {len(runs)} runs")
        if who is None:
            return 0
        items = [SubmitItem.from_dict(run) for run in runs]
        return sum(answer.ok for answer in _submitted(runtime, items, who))


def _add_ping_task(app: Celery) -> None:
    """The task a worker pings itself with through the broker (cairn.workers.liveness)."""

    @app.task(
        name=PING_TASK,
        ignore_result=True,
        shared=False,
        Strategy="cairn.workers.liveness:ping_strategy",
    )
    def ping(**_kwargs: Any) -> None:
        """Never runs: the consumer answers a ping itself (see its strategy)."""


def _configure(app: Celery, settings: Settings) -> None:
    if urlsplit(settings.broker_url).scheme in ("redis", "rediss"):
        app.conf.broker_transport = REDIS_TRANSPORT
    transport: dict[str, Any] = {"visibility_timeout": settings.visibility_timeout}
    if urlsplit(settings.broker_url).scheme in ("redis", "rediss"):
        # A list per level, the lowest served first (cairn.workers.fairness).
        transport["priority_steps"] = PRIORITY_STEPS
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        event_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        result_backend=None,
        task_default_queue=settings.queue,
        task_create_missing_queues=True,
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        visibility_timeout=settings.visibility_timeout,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=settings.task_events,
        worker_cancel_long_running_tasks_on_connection_loss=True,
    )


def _submitter(app: Celery, runtime: Any, namespace: str | None, what: str) -> Principal | None:
    """Who a broker submission is made by, as configured — or None (logged, audited,
    acknowledged: sending it again would be refused again)."""
    who = broker_principal(app.cairn_settings)
    refusal = None
    if who is None:
        refusal = "broker submissions are off (set CAIRN_BROKER_SUBMIT=name@namespace)"
    elif namespace is not None and namespace != who.namespace:
        refusal = f"{who.actor} submits into namespace {who.namespace!r}, not {namespace!r}"
    if refusal is None:
        return who
    log.error("submit refused: %s: %s", what, refusal)
    refused_as = who or Principal(
        "unconfigured", namespace or "*", Role.VIEWER, PrincipalKind.BROKER
    )
    Audit(runtime.store).record(
        Entry.by(refused_as, "run.submit", "refused", source="broker", detail={"refused": refusal})
    )
    return None


def _submitted(runtime: Any, items: list[SubmitItem], who: Principal) -> list[Submitted]:
    answers: list[Submitted] = runtime.orchestrator.submit_batch(
        items, namespace=who.namespace, actor=who.actor
    )
    for answer in answers:
        if not answer.ok:  # acked anyway: sending it again would be refused again
            log.error("submit refused (item %d): %s", answer.index, answer.error)
    accepted = sum(answer.ok for answer in answers)
    Audit(runtime.store).record(
        Entry.by(
            who,
            "run.submit" if len(items) == 1 else "run.submit_batch",
            "ok" if accepted else "failed",
            target=answers[0].run_id if len(answers) == 1 else None,
            source="broker",
            detail={"accepted": accepted, "refused": len(answers) - accepted},
        )
    )
    return answers


def _hand_over(app: Celery, runner: Any, task_id: str) -> HandOver | None:
    """How this task hands its node over to be awaited, if it is async: acked when it
    concludes, by the main process (None: awaited holding its pool slot)."""
    acks: DeferredAcks | None = getattr(app, "cairn_deferred", None)
    limit = app.cairn_settings.async_nodes
    if acks is None or limit == 0:
        return None
    nodes = AwaitingNodes.of_process(limit)
    concluded = partial(acks.concluded, task_id)
    return lambda ready: nodes.hand_over(runner, ready, concluded)


def _fairness(app: Celery) -> Fairness:
    fairness = getattr(app, "cairn_fairness", None)
    if fairness is None:
        settings: Settings = app.cairn_settings
        url = settings.broker_url
        redis_broker = urlsplit(url or "").scheme in ("redis", "rediss")
        fairness = app.cairn_fairness = Fairness(
            url if redis_broker else None,
            enabled=settings.fairness,
            weights=settings.namespace_weights,
        )
    return fairness


def _submitted_controlled(
    runtime: Any,
    workflow: str,
    run_input: dict[str, Any],
    who: Principal,
    *,
    debounce: dict[str, Any] | None,
    singleton: dict[str, Any] | None,
    **options: Any,
) -> str | None:
    """A debounced or singleton submission; a refused one is logged and acked (sending
    it again would be refused again)."""
    run_id: str | None = None
    try:
        run_id = str(
            runtime.orchestrator.submit(
                workflow,
                run_input,
                debounce=None if debounce is None else Debounce.of(debounce),
                singleton=None if singleton is None else Singleton.of(singleton),
                namespace=who.namespace,
                actor=who.actor,
                **options,
            )
        )
    except (CairnError, TypeError, AttributeError) as error:  # not a mapping: refused too
        log.error("submit refused: %s", error)
    outcome = "ok" if run_id is not None else "failed"
    Audit(runtime.store).record(
        Entry.by(who, "run.submit", outcome, target=run_id, source="broker")
    )
    return run_id


def _published_at(request: Any) -> float | None:
    value = getattr(request, PUBLISHED_HEADER, None)
    # Any producer can send to the queue: a header that is not a time is no time.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def checked_strategy(task: Any, app: Celery, consumer: Any, **kwargs: Any) -> Any:
    """Celery's message strategy, refusing a body that is not a task call first.

    Celery expects ``[args, kwargs, embed]``; other JSON (an object, null, a string) makes
    the consumer raise an error that Celery treats as unrecoverable: the worker exits and
    the message goes back to the queue to kill the next one. Raising InvalidTaskError
    instead makes Celery log the message and reject it.
    """
    handle = default_strategy(task, app, consumer, **kwargs)

    def checked(message: Any, body: Any, *args: Any, **kw: Any) -> Any:
        payload = message.payload if body is None else body
        if not (
            isinstance(payload, list | tuple)
            and len(payload) == 3
            and isinstance(payload[0], list | tuple)
            and isinstance(payload[1], dict)
            and isinstance(payload[2], dict | type(None))
        ):
            raise InvalidTaskError(f"not a task call ([args, kwargs, embed]): {payload!r:.200}")
        return handle(message, body, *args, **kw)

    return checked


class CeleryPublisher:
    def __init__(self, app: Celery, queue: str, copies: int = 1) -> None:
        self.app = app
        self.queue = queue
        self.copies = copies  # >1 only in tests: every message delivered more than once
        # Levels need a Redis broker (a list per level); elsewhere messages go unordered.
        self.fairness = _fairness(app)

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        with self.app.producer_or_acquire() as producer:
            sent = [m for m in messages for _ in range(self.copies)]
            levels: list[int | None] = [None] * len(sent)
            if self.fairness.leveled:
                levels = list(self.fairness.levels(sent, self.queue))
            for message, level in zip(sent, levels, strict=True):
                body = message.body()
                headers: dict[str, Any] = {PUBLISHED_HEADER: clock.wall()}
                if self.fairness.enabled:
                    headers[FAIR_HEADER] = self.fairness.header(message, self.queue)
                if message.siblings:
                    headers[SIBLINGS_HEADER] = siblings_header(message)
                # argsrepr given: Celery would otherwise saferepr() the arguments per message
                self.app.send_task(
                    NODE_TASK,
                    args=[body],
                    queue=build_queue(message.queue or self.queue, message.build),
                    shadow=message.task_name,
                    producer=producer,
                    argsrepr=json.dumps([body]),
                    kwargsrepr="{}",
                    headers=headers,
                    priority=level,
                )
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        name = queue or self.queue
        if self.fairness.leveled:
            try:  # counted across its levels; an empty queue's fairness counts go
                return self.fairness.backlog(name)
            except Exception:
                log.warning("could not read the length of queue %s", name, exc_info=True)
                return None
        try:
            with self.app.pool.acquire(block=True) as connection:
                declared = connection.default_channel.queue_declare(queue=name, passive=True)
                return int(declared.message_count)
        except ChannelError:  # Redis drops an empty list: an empty queue does not exist
            return 0
        except Exception:
            log.warning("could not read the length of queue %s", name, exc_info=True)
            return None


# -- one runtime per worker process, built after the fork ---------------------------------

_runtimes: dict[int, Any] = {}
_lock = threading.Lock()


def _process_runtime(app: Celery) -> Any:
    key = id(app)
    runtime = _runtimes.get(key)
    if runtime is None:
        with _lock:
            runtime = _runtimes.get(key)
            if runtime is None:
                build = app.cairn_runtime
                if build is None:
                    raise RuntimeError(
                        "this Celery app was made without a runtime: it publishes, it does "
                        "not run nodes (use `cairn worker`, or `celery -A cairn.runtime`)"
                    )
                runtime = _runtimes[key] = build(app)
    return runtime


@worker_process_init.connect
def _forget_parent_runtimes(**_kwargs: Any) -> None:
    # Connections opened before the fork belong to the parent.
    _runtimes.clear()
    in_pool_process()
    # A prefork child runs one node at a time and is replaced when it ends: a handler
    # that outlives its timeout and grace period ends it (see cairn.workers.deadlines).
    deadlines.isolate()


@worker_process_shutdown.connect
def _close_runtimes(**_kwargs: Any) -> None:
    # A warm shutdown: the async nodes awaiting in this process conclude first.
    awaiting = AwaitingNodes.in_process()
    if awaiting is not None:
        awaiting.drain()
    for runtime in list(_runtimes.values()):
        runtime.close()
    _runtimes.clear()
