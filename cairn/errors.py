"""The error hierarchy: one root, typed by layer.

Every error cairn raises on purpose derives from :class:`CairnError`, so callers can
catch "anything cairn refused" in one place and the CLI can turn it into a clear message
and a non-zero exit. Errors carry their facts as attributes (not only in the message) and
round-trip through JSON via :meth:`CairnError.to_dict`, because they cross process
boundaries (worker → orchestrator → API).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar


class CairnError(Exception):
    """Root of every error cairn raises deliberately.

    ``code`` is stable, for programs; the message says what is wrong and why, for people;
    ``hint``, where an error has one, says what to do about it (the command line prints
    it after the message, docs/errors.md lists it)."""

    code = "cairn_error"
    hint: ClassVar[str | None] = None

    def to_dict(self) -> dict[str, Any]:
        """The error as the API answers it: ``{"code", "message"}`` and its details."""
        return {"code": self.code, "message": str(self)}


@dataclass(frozen=True)
class DefinitionFault:
    """One problem in a workflow definition: where it is and what is wrong.

    ``code`` is stable (tests and tools match on it); ``message`` is for people.
    ``node`` is ``None`` for faults of the workflow as a whole.
    """

    code: str
    message: str
    node: str | None = None

    def __str__(self) -> str:
        where = f"node {self.node!r}" if self.node is not None else "workflow"
        return f"{where}: {self.message} [{self.code}]"


class WorkflowDefinitionError(CairnError):
    """A definition failed validation. ``faults`` lists every problem found, not the first."""

    code = "invalid_definition"
    hint = "docs/definitions.md#validation-faults says what each fault's code means"

    def __init__(self, faults: list[DefinitionFault], source: str | None = None) -> None:
        self.faults = list(faults)
        self.source = source
        head = f"{source}: " if source else ""
        lines = "\n".join(f"  - {fault}" for fault in self.faults)
        super().__init__(f"{head}{len(self.faults)} problem(s) in workflow definition:\n{lines}")

    @property
    def codes(self) -> list[str]:
        """The code of every fault, in order."""
        return [fault.code for fault in self.faults]

    def to_dict(self) -> dict[str, Any]:
        """The error as the API answers it, with every fault."""
        return {**super().to_dict(), "faults": [asdict(fault) for fault in self.faults]}


@dataclass(frozen=True)
class QueueUse:
    """A node (or, with ``node`` None, a workflow's default) sent to ``queue``."""

    workflow: str
    node: str | None
    queue: str


class UndeclaredQueue(WorkflowDefinitionError):
    """A definition sends nodes to a queue the deployment does not declare
    (``CAIRN_QUEUES``): no worker would ever consume their messages, so the runs would
    wait forever. ``undeclared`` names each such use, ``declared`` what is known (the
    default queue included)."""

    code = "undeclared_queue"

    def __init__(
        self,
        faults: list[DefinitionFault],
        undeclared: list[QueueUse],
        declared: tuple[str, ...],
        source: str | None = None,
    ) -> None:
        self.undeclared = list(undeclared)
        self.declared = declared
        super().__init__(faults, source)

    def to_dict(self) -> dict[str, Any]:
        """The error as the API answers it, with the queues declared and those used."""
        return {
            **super().to_dict(),
            "undeclared": [asdict(use) for use in self.undeclared],
            "declared": list(self.declared),
        }


class IllegalTransition(CairnError):
    """A state change that the transition table does not allow. Nothing was changed."""

    code = "illegal_transition"

    def __init__(
        self, machine: str, subject: str, current: str, target: str, why: str = ""
    ) -> None:
        self.machine = machine
        self.subject = subject
        self.current = current
        self.target = target
        detail = f": {why}" if why else ""
        super().__init__(f"{machine} {subject}: {current} -> {target} is not allowed{detail}")


class EventRejected(CairnError):
    """An event the run cannot accept in its current state (e.g. a signal nobody waits for).

    Like :class:`IllegalTransition`, it is raised before anything is written.
    """

    code = "event_rejected"


class UnknownSignal(EventRejected):
    code = "unknown_signal"
    hint = "`cairn status RUN` shows the signals its wait takes"


class NotWaiting(EventRejected):
    code = "not_waiting"
    hint = "`cairn waiting` lists the runs waiting for a decision"


class UnknownNode(EventRejected):
    code = "unknown_node"


class NotMigratable(EventRejected):
    """A run that may not move to another version of its workflow now (it is not
    standing still, the mapping places it nowhere the new graph has), or a migration's
    rollback that does not apply. Nothing is written."""

    code = "not_migratable"
    hint = "`cairn runs migrate --dry-run` says per run what would move and why not"


class Forbidden(CairnError):
    """An authenticated principal asked for what its role — or a wait's approvers, or
    its namespace — does not allow. Nothing is written."""

    code = "forbidden"
    hint = "ask an admin for a principal whose role may (docs/access.md#roles)"


class StoreError(CairnError):
    """The database refused or could not do what was asked."""

    code = "store_error"


class StoreUnavailable(CairnError):
    """The database could not be reached (a restart, the network), chained from the
    driver's error: what the store raises for every outage, so that nothing above it
    needs to know the driver. Retried with backoff where a result would otherwise be
    lost (:mod:`cairn.reconnect`); past ``CAIRN_RECONNECT_WITHIN`` inside a handler's
    ``ctx.effect`` it is not the handler's failure: the worker gives its message back to
    the broker, and the node runs again on the same attempt."""

    code = "unavailable"
    hint = "check that the database at CAIRN_DATABASE_URL is up and reachable, then try again"


class StoreRefused(StoreError):
    """The database refused a value (out of range, too long, not its type): the caller's
    fault, as far as it can tell."""

    code = "invalid_value"


class StaleTransition(StoreError):
    """A guarded write found its row somewhere it may not move from: an execution not in a
    status the transition leaves, a dispatch that would not move an execution forward, a
    run no longer at the seq the step follows. Nothing is written (the transaction rolls
    back): the caller acted on a view of the run that is no longer true."""

    code = "stale_transition"
    hint = "the run moved meanwhile: read it again and retry"


class RunNotFound(CairnError):
    code = "run_not_found"
    hint = "`cairn runs` lists the runs this namespace may see"


class UnknownWorkflow(CairnError):
    """No such workflow (or version) that the asking namespace may see: one another
    namespace owns and did not share with it is unknown too (the 404 does not tell that
    it exists)."""

    code = "unknown_workflow"
    hint = "`cairn register FILE` registers it (or ask its owner to share it: `cairn shares`)"


class VersionConflict(CairnError):
    """A changed definition registered under a version that is registered already: a
    version is immutable once runs may have pinned it (register the change as a new
    version)."""

    code = "version_conflict"
    hint = "register the changed definition under a new version"


class ShareNotFound(CairnError):
    code = "share_not_found"


class InvalidInput(CairnError):
    """A run's input (or a payload) is not what the definition accepts."""

    code = "invalid_input"


class AmbiguousWorkflow(InvalidInput):
    """A bare workflow name that the asking namespace does not own and that two other
    namespaces share with it: say which one (``namespace/workflow``)."""

    code = "ambiguous_workflow"


class InvalidSchedule(InvalidInput):
    """A schedule that cannot be kept: its cron expression, time zone, overlap policy,
    catch-up window, jitter or name is wrong (see docs/flow-control.md)."""

    code = "invalid_schedule"


class ScheduleNotFound(CairnError):
    code = "schedule_not_found"
    hint = "`cairn schedule list` lists the namespace's schedules"


class ScheduleExists(CairnError):
    """A schedule of that name is in the namespace already (update it, or delete it)."""

    code = "schedule_exists"


class FlowConflict(CairnError):
    """A debounce key already holds a pending run of another workflow or version: the
    submission cannot join it."""

    code = "flow_conflict"


class IdempotencyConflict(CairnError):
    """A request id (an ``Idempotency-Key``) reused for a different request: another
    workflow, version or input than the run it started."""

    code = "idempotency_conflict"
    hint = "send the original request again, or use a new request id"


class ConfirmationRequired(CairnError):
    """A request that undoes work (a rollback) must be confirmed explicitly."""

    code = "confirmation_required"
    hint = "look at what it will undo, then confirm (--yes)"


class EffectNotFound(CairnError):
    code = "effect_not_found"


class EffectNotOpen(CairnError):
    """An effect a person would resolve is not flagged or of unknown outcome (any more)."""

    code = "effect_not_open"


class CodeUnavailable(CairnError):
    """The handlers a replay or a dry run would run cannot be imported in this process."""

    code = "code_unavailable"
    hint = "run it where the handlers' package is installed (or on PYTHONPATH)"


class NotPaused(CairnError):
    """A workflow or queue to resume is not paused (in the caller's namespace)."""

    code = "not_paused"


class SelectionChanged(CairnError):
    """A bulk action's filter selects other runs than its dry run counted: nothing done."""

    code = "selection_changed"


class ConfigError(CairnError):
    """Settings that cannot be used (unknown ``CAIRN_*`` variables, bad values)."""

    code = "config_error"
    hint = "`cairn config` prints the settings in effect; docs/configuration.md lists them"


class SchemaOutOfDate(ConfigError):
    """The database's schema is older than this cairn's: ``cairn db upgrade`` first."""

    code = "schema_out_of_date"
    hint = ""  # the message says what to run


class ArtifactError(CairnError):
    """An artifact could not be written, registered or read. Retrying does not help: a
    handler that raises it fails permanently (see :mod:`cairn.model.classify`)."""

    code = "artifact_error"
    error_class = "permanent"


class ArtifactNotFound(ArtifactError):
    """No artifact of that name (or version) in the run, or its content is gone."""

    code = "artifact_not_found"


class ArtifactCorrupt(ArtifactError):
    """The object store returned bytes whose sha256 is not the one registered."""

    code = "artifact_corrupt"
