"""What a node task's events tell Flower: what became of its message, truthfully.

Flower builds its task list from the workers' task events, and Celery sends
``task-succeeded`` whenever a task returns, so every node message read as a successful
execution: a node whose handler failed, a duplicate delivery, a node parked for a
concurrency slot. Now:

- a node that ran and committed its result: ``task-succeeded`` — SUCCESS; if its worker
  then continued with the steps after it (:mod:`cairn.workers.step.continuation`), the
  result names them: they run inside this task, and have no task of their own;
- a node whose committed result is a failure (:class:`~cairn.workers.failed.Failed`), or
  one failed without running again because its workers kept dying (``gave_up``): the
  task raises :class:`NodeFailure` — ``task-failed``, FAILURE, with the node and error;
- any other outcome (nothing ran, or what ran was not committed): the task returns the
  outcome's name and the worker sends ``task-<state>`` instead of ``task-succeeded`` —
  a state of its own in Flower (PARKED, ALREADY_DONE, LEASE_HELD, ...; ``docs/operations.md``).

The message is acknowledged as before in every case. A task that returns is acked by
Celery's ``on_success`` (late acks), and one that raises an ordinary exception by its
``on_failure``, because ``task_acks_on_failure_or_timeout`` is set: the same ack, not a
reject, a requeue or a retry. (``Ignore`` would ack too, but sends no event at all: the
task would stay STARTED in Flower for ever.) The event's type is changed in the worker's
main process, which keeps the switch Flower turns events on and off with: a worker whose
events are off sends none of these either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from celery.worker.request import Request

from cairn.errors import CairnError
from cairn.workers.failed import Failed
from cairn.workers.runner import Handled

# Flower's state is the event's name in capitals. Two outcomes are renamed: Celery's own
# REJECTED means a message given back to the broker, and its task-cancelled a task
# stopped by a lost connection (redelivered) — neither is what these outcomes did.
RENAMED = {Handled.REJECTED: "invalid", Handled.CANCELLED: "node_cancelled"}
RAN = (Handled.COMMITTED, Handled.GAVE_UP)  # succeeded, failed: Celery's own events

# What the worker's main process sees of the returned value is its repr.
EVENT_BY_RESULT = {
    repr(handled.value): f"task-{RENAMED.get(handled, handled.value)}"
    for handled in Handled
    if handled not in RAN
}


class NodeFailure(CairnError):
    """A node task whose node failed: what Flower shows as the task's exception."""

    code = "node_failed"


def task_result(handled: Handled | Failed, task_name: str, continued: Sequence[str] = ()) -> str:
    """The node task's return value, or :class:`NodeFailure` for a node that failed.
    A committed step that its worker continued from names the steps it went on with
    (``committed; continued: s2#1 committed, s3#1 committed``): they have no task of
    their own."""
    if isinstance(handled, Failed):
        raise NodeFailure(str(handled))
    if handled is Handled.GAVE_UP:
        raise NodeFailure(
            f"{task_name} failed (gave up): its worker was lost too often "
            "(CAIRN_MAX_RECOVERIES); not run again"
        )
    if continued and handled is Handled.COMMITTED:
        return f"{handled.value}; continued: {', '.join(continued)}"
    return handled.value


# What the main process sees a task return when it handed its async node over.
AWAITING_RESULTS = frozenset({Handled.AWAITING.value, repr(Handled.AWAITING.value)})


class NodeRequest(Request):  # type: ignore[misc]  # celery is untyped
    """Celery's request for a node task, sending the outcome's own event where Celery
    would send ``task-succeeded`` for a message that did not run a node to success — and
    holding the message of a task that handed its async node over, unacked, until the
    node concludes (:mod:`cairn.workers.deferred`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Celery's strategy subclasses this class with an on_success of its own, which
        # acks at once: the instance's attribute is what the pool calls back.
        self._acked_on_success: Callable[..., Any] = super().__getattribute__("on_success")
        self.on_success = self._returned

    def _returned(self, failed__retval__runtime: Any, **kwargs: Any) -> Any:
        failed, retval, _runtime = failed__retval__runtime
        acks = getattr(self._app, "cairn_deferred", None)
        if (
            not failed
            and acks is not None
            and isinstance(retval, str)
            and retval in AWAITING_RESULTS
        ):
            acks.hold(self)
            return None
        return self._acked_on_success(failed__retval__runtime, **kwargs)

    def send_event(self, event: str, **fields: Any) -> None:
        if event == "task-succeeded":
            event = EVENT_BY_RESULT.get(str(fields.get("result")), event)
        super().send_event(event, **fields)
