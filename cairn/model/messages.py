"""The node task's message: what a worker needs to find one execution, as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from cairn.errors import EventRejected
from cairn.model.builds import build_id_problem
from cairn.model.events import Phase
from cairn.model.keys import ExecutionKey, lease_key
from cairn.model.payloads import storable_text
from cairn.model.priority import MAX_PRIORITY, MIN_PRIORITY
from cairn.model.queues import queue_name_problem
from cairn.model.workflow_names import DEFAULT_NAMESPACE


def message_namespace(namespace: str) -> str | None:
    """A run's namespace as its messages carry it: None for the default one."""
    return None if namespace == DEFAULT_NAMESPACE else namespace


class InvalidMessage(EventRejected):
    code = "invalid_message"


@dataclass(frozen=True)
class NodeMessage:
    run_id: str
    # The run's workflow as cairn sends it: ``checkout`` of the default namespace,
    # ``acme/checkout`` of another (cairn.model.workflow_names.qualified) — the namespace
    # that owns the definition, which is not the run's own when the workflow is shared.
    workflow: str
    version: int
    node: str
    iteration: int
    attempt: int
    phase: Phase = Phase.RUN
    outbox_id: int | None = None
    # Dispatched again after an interruption (its worker was lost, or an operator
    # retried it): the workflow's on_resume check runs before the handler.
    resumed: bool = False
    # Published again by a slot's release: it waited for a concurrency slot, and its
    # record of waiting goes once it has one.
    woken: bool = False
    # The broker queue it goes to (its node's ``queue``); None: the default queue. Left
    # out of the JSON when None, so a message for the default queue reads as before.
    queue: str | None = None
    # Its run's priority (-5..5, higher first) and namespace: the broker band it is
    # published in (cairn.workers.fairness). Left out of the JSON when 0 and None. The
    # namespace travels in the outbox row; to the broker, in a header — a node message
    # body is what it was, and a worker of an older version reads it.
    priority: int = 0
    namespace: str | None = None
    # The build it is routed to (docs/versions.md): published to ``<queue>@<build>``,
    # which only that build's workers consume. Left out of the JSON when None.
    build: str | None = None
    # Branches of the same fork its worker runs after it, one after another (a group,
    # cairn.engine.grouping): never in the body or the outbox row — a header
    # carries them, which a worker of an older version ignores (their rows are relayed).
    siblings: tuple[Sibling, ...] = ()

    @property
    def key(self) -> ExecutionKey:
        return ExecutionKey(self.run_id, self.node, self.iteration, self.phase.value)

    @property
    def lease_key(self) -> str:
        """The key its execution's lease is claimed under."""
        return lease_key(self.run_id, self.node, self.iteration, self.phase.value)

    @property
    def task_name(self) -> str:
        """What operators see in Flower and logs: the workflow and the node
        (``checkout.charge``; ``acme/checkout.charge`` outside the default namespace)."""
        suffix = ":compensate" if self.phase is Phase.COMPENSATE else ""
        return f"{self.workflow}.{self.node}{suffix}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "node": self.node,
            "iteration": self.iteration,
            "attempt": self.attempt,
            "phase": self.phase.value,
            "outbox_id": self.outbox_id,
        }
        if self.resumed:
            data["resumed"] = True
        if self.woken:
            data["woken"] = True
        if self.queue is not None:
            data["queue"] = self.queue
        if self.priority:
            data["priority"] = self.priority
        if self.namespace is not None:
            data["namespace"] = self.namespace
        if self.build is not None:
            data["build"] = self.build
        return data

    def spread(self) -> list[NodeMessage]:
        """The message and each sibling it carries as messages of their own."""
        if not self.siblings:
            return [self]
        return [replace(self, siblings=()), *(s.of(self) for s in self.siblings)]

    def body(self) -> dict[str, Any]:
        """The JSON a broker carries: :meth:`to_dict` without the namespace (a header)."""
        data = self.to_dict()
        data.pop("namespace", None)
        return data

    @classmethod
    def from_dict(cls, data: object) -> NodeMessage:
        """Validate a message body from the broker; a malformed one is refused whole."""
        if not isinstance(data, Mapping):
            raise InvalidMessage(f"a node message is a JSON object, got {type(data).__name__}")
        problems = _required_problems(data)
        problems += _optional_problems(data)
        outbox_id = data.get("outbox_id")
        resumed = data.get("resumed", False)
        woken = data.get("woken", False)
        queue = data.get("queue")
        priority = data.get("priority", 0)
        namespace = data.get("namespace")
        build = data.get("build")
        phase = _phase(data, problems)
        unknown = set(data) - _FIELDS
        if unknown:
            problems.append(f"unknown field(s) {sorted(unknown)}")
        if problems:
            raise InvalidMessage("invalid node message: " + "; ".join(problems))
        return cls(
            data["run_id"],
            data["workflow"],
            data["version"],
            data["node"],
            data["iteration"],
            data["attempt"],
            phase,
            outbox_id,
            resumed is True,
            woken is True,
            queue,
            priority,
            namespace,
            build,
        )


@dataclass(frozen=True)
class Sibling:
    """A branch a message carries for its worker to run after it: of the same run, phase,
    queue, priority and build as the message, a first attempt, with an outbox row."""

    node: str
    iteration: int
    outbox_id: int

    @classmethod
    def from_message(cls, message: NodeMessage) -> Sibling:
        if message.outbox_id is None:
            raise ValueError(f"{message.key} has no outbox row to be carried with")
        return cls(message.node, message.iteration, message.outbox_id)

    def of(self, lead: NodeMessage) -> NodeMessage:
        """Its own message, made from the message that carried it."""
        return replace(
            lead,
            node=self.node,
            iteration=self.iteration,
            attempt=1,
            outbox_id=self.outbox_id,
            resumed=False,
            woken=False,
            siblings=(),
        )


# Most siblings a header may carry: a group is small (CAIRN_BRANCHES_PER_MESSAGE).
MAX_SIBLINGS = 64


def siblings_header(message: NodeMessage) -> list[list[Any]]:
    """The siblings as their header carries them: ``[[node, iteration, outbox_id], …]``."""
    return [[s.node, s.iteration, s.outbox_id] for s in message.siblings]


def siblings_from_header(value: object) -> tuple[Sibling, ...]:
    """The siblings a header names (none when absent); a malformed header is refused
    whole (InvalidMessage)."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or len(value) > MAX_SIBLINGS:
        raise InvalidMessage(f"siblings must be a list of at most {MAX_SIBLINGS} entries")
    siblings = []
    for entry in value:
        if not (isinstance(entry, list | tuple) and len(entry) == 3):
            raise InvalidMessage("a sibling is [node, iteration, outbox_id]")
        node, iteration, outbox_id = entry
        if not isinstance(node, str) or not node or not storable_text(node):
            raise InvalidMessage("a sibling's node must be a non-empty string of valid text")
        for name, number in (("iteration", iteration), ("outbox_id", outbox_id)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise InvalidMessage(f"a sibling's {name} must be a positive integer")
        siblings.append(Sibling(node, iteration, outbox_id))
    return tuple(siblings)


# Every field a node message body may carry; any other refuses it.
_FIELDS = frozenset(
    {
        "run_id",
        "workflow",
        "version",
        "node",
        "iteration",
        "attempt",
        "phase",
        "outbox_id",
        "resumed",
        "woken",
        "queue",
        "priority",
        "namespace",
        "build",
    }
)


def _required_problems(data: Mapping[str, Any]) -> list[str]:
    """What is wrong with a message body's required fields."""
    problems: list[str] = []
    for name in ("run_id", "workflow", "node"):
        value = data.get(name)
        if not isinstance(value, str) or not value or not storable_text(value):
            problems.append(f"{name} must be a non-empty string of valid text")
    for name in ("version", "iteration", "attempt"):
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name} must be a positive integer")
    return problems


def _phase(data: Mapping[str, Any], problems: list[str]) -> Phase:
    """A message body's phase (run when absent); an unknown one is noted in ``problems``."""
    try:
        return Phase(data.get("phase", Phase.RUN.value))
    except ValueError:
        problems.append(f"phase must be one of {[p.value for p in Phase]}")
        return Phase.RUN


def _optional_problems(data: Mapping[str, Any]) -> list[str]:
    """What is wrong with a message body's optional fields."""
    problems: list[str] = []
    outbox_id = data.get("outbox_id")
    if outbox_id is not None and (isinstance(outbox_id, bool) or not isinstance(outbox_id, int)):
        problems.append("outbox_id must be an integer")
    resumed = data.get("resumed", False)
    if not isinstance(resumed, bool):
        problems.append("resumed must be true or false")
    woken = data.get("woken", False)
    if not isinstance(woken, bool):
        problems.append("woken must be true or false")
    queue = data.get("queue")
    if queue is not None and (problem := queue_name_problem(queue)) is not None:
        problems.append(f"queue: {problem}")
    priority = data.get("priority", 0)
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not MIN_PRIORITY <= priority <= MAX_PRIORITY
    ):
        problems.append(f"priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}")
    namespace = data.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        problems.append("namespace must be a non-empty string")
    build = data.get("build")
    if build is not None and (problem := build_id_problem(build)) is not None:
        problems.append(f"build: {problem}")
    return problems
