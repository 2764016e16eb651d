"""Request bodies, and the responses only the API needs (the run endpoints' responses
are :mod:`cairn.http.models`, shared with the HTTP client).

Requests forbid unknown fields (a typo in ``"imput"`` must not start a run with an empty
input), and every string that reaches a column has the column's limit and must be
storable text, so a bad value is a 422 naming the field, never a database error."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from cairn.engine.batches import MAX_BATCH
from cairn.model.payloads import storable_text
from cairn.model.priority import MAX_PRIORITY, MIN_PRIORITY

MAX_INT = 2**31 - 1  # PostgreSQL integer columns (version, seq)


def _storable(value: str) -> str:
    if not storable_text(value):
        raise ValueError("contains a NUL character or text that is not valid Unicode")
    return value


# Lengths are the columns' (runs.workflow, runs.request_id: 200 characters).
WorkflowName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_storable)]
RequestId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_storable)]
Short = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_storable)]
Reason = Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_storable)]
Version = Annotated[int, Field(ge=1, le=MAX_INT)]
Priority = Annotated[
    int,
    Field(
        strict=True,  # 1.0, "1" and true are no priority
        ge=MIN_PRIORITY,
        le=MAX_PRIORITY,
        description="-5..5, higher first: who gets the next free concurrency slot and the next "
        "worker (default 0; docs/flow-control.md#priority-and-fairness).",
    ),
]
WebhookUrl = Annotated[
    str,
    Field(
        min_length=1,
        max_length=2000,
        description="Announce the run's end and milestones here, signed (docs/webhooks.md).",
    ),
    AfterValidator(_storable),
]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A duration: "30s", "5m", "1h30m", or a number of seconds.
Duration = Annotated[str | float, Field(description='A duration: "30s", "5m", or seconds.')]
FlowKey = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_storable)]


class DebounceRequest(Request):
    key: FlowKey = Field(description="Submissions with this key collapse into one run.")
    wait: Duration = Field(description="It starts this long after the last of them...")
    max_wait: Duration | None = Field(
        default=None, description="...but no later than this long after the first."
    )


class SingletonRequest(Request):
    key: FlowKey = Field(description="One unfinished run per key in the namespace.")
    mode: Literal["skip", "cancel"] = Field(
        default="skip",
        description="While one is unfinished: skip (answer with it) or cancel it and start.",
    )


class SubmitRequest(Request):
    workflow: WorkflowName
    input: dict[str, Any] = Field(default_factory=dict, description="The run's input.")
    version: Version | None = Field(default=None, description="Pin a version (default newest).")
    webhook: WebhookUrl | None = None
    debounce: DebounceRequest | None = Field(
        default=None, description="Collapse rapid submissions (docs/flow-control.md)."
    )
    singleton: SingletonRequest | None = Field(
        default=None, description="Keep one unfinished run per key (docs/flow-control.md)."
    )
    priority: Priority | None = None


class BatchItem(Request):
    workflow: WorkflowName
    input: dict[str, Any] = Field(default_factory=dict)
    version: Version | None = None
    webhook: WebhookUrl | None = None
    priority: Priority | None = None
    request_id: RequestId | None = Field(
        default=None, description="Idempotency: the same request id returns the same run."
    )


class BatchRequest(Request):
    runs: list[BatchItem] = Field(min_length=1, max_length=MAX_BATCH)


class SignalRequest(Request):
    """Who decides is the request's principal (its API key), never a field of the body."""

    payload: dict[str, Any] | None = None
    comment: Reason | None = Field(
        default=None, description="What the decider says beside it (kept in the log)."
    )
    signal_id: RequestId | None = Field(
        default=None, description="Idempotency: the same signal id is applied once."
    )
    node: Short | None = Field(
        default=None, description="The wait or held node this answers (if several)."
    )


class CancelRequest(Request):
    reason: Reason = "cancelled through the API"


class ForkRequest(Request):
    at_seq: Annotated[int, Field(ge=1, le=MAX_INT)] = Field(
        description="Fork from the run's state after this event (a checkpoint: cairn events)."
    )
    patch: dict[str, Any] | None = Field(
        default=None, description="A JSON merge patch (RFC 7386) of the run's vars."
    )
    confirm: bool = Field(
        default=False,
        description="Must be true: the fork is a real run whose effects reach the outside "
        "world, under fresh idempotency keys. (Dry runs: `cairn fork` without --live.)",
    )


Seq = Annotated[int, Field(ge=1, le=MAX_INT)]


class ReplayRequest(Request):
    from_seq: Seq = Field(default=1, description="Replay the steps from this seq on.")


class DryRunRequest(Request):
    at_seq: Seq = Field(description="Fork from the run's state after this event.")
    patch: dict[str, Any] | None = Field(
        default=None, description="A JSON merge patch (RFC 7386) of the run's vars."
    )
    max_steps: Annotated[int, Field(ge=1, le=10_000)] = Field(
        default=200, description="Stop after this many decisions."
    )


class RollbackRequest(Request):
    reason: Reason
    confirm: bool = Field(
        default=False, description="Must be true: a rollback undoes steps that took effect."
    )
    to_seq: Seq | None = Field(
        default=None, description="Undo only the steps after this event, then resume there."
    )
    step: Short | None = Field(
        default=None, description="Undo only this node's change (its latest visit), then go on."
    )
    step_iteration: Annotated[int, Field(ge=1, le=MAX_INT)] | None = Field(
        default=None, description="The visit of ``step`` to undo."
    )


class ResolveRequest(Request):
    outcome: Literal["applied", "absent", "compensated"] = Field(
        description="What really happened at the external system: it took effect, it never "
        "did, or it took effect and was undone by hand."
    )
    note: Reason = Field(description="What you checked, and where (kept with the effect).")
    record: dict[str, Any] | None = Field(
        default=None, description="The external system's record of it, if you have it."
    )


class ReconcileRequest(Request):
    grace_s: Annotated[float, Field(ge=0, le=30 * 86400)] | None = Field(
        default=None, description="Seconds an intent may be in flight before it is checked."
    )
    limit: Annotated[int, Field(ge=1, le=5000)] = Field(
        default=500, description="At most this many effects in this pass."
    )


class PoolList(BaseModel):
    pools: list[dict[str, Any]]


class Activity(BaseModel):
    heartbeat_interval_s: float
    workers: list[dict[str, Any]]
    queues: list[dict[str, Any]]
    running: list[dict[str, Any]]
    stalled: list[dict[str, Any]]
    code_faults: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Workflow versions a worker could not import the handlers of, "
        "reported in the last 10 minutes (docs/operations.md#code-a-worker-cannot-load).",
    )


class CircuitList(BaseModel):
    circuits: list[dict[str, Any]]


class RateList(BaseModel):
    buckets: list[dict[str, Any]]


class ShareRequest(Request):
    namespace: Annotated[
        str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    ] = Field(description="The namespace to share it with.")
    version: Version | None = Field(
        default=None, description="One version (default: every version, and those to come)."
    )


# -- schedules --------------------------------------------------------------------------

ScheduleName = Annotated[
    str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]
Cron = Annotated[
    str,
    Field(min_length=1, max_length=200, description='"0 9 * * MON"; six fields: seconds first.'),
    AfterValidator(_storable),
]
TimeZone = Annotated[str, Field(min_length=1, max_length=64, description="An IANA time zone.")]
Overlap = Literal["skip", "buffer_one", "cancel_running", "allow"]


class ScheduleRequest(Request):
    name: ScheduleName
    workflow: WorkflowName
    cron: Cron
    version: Version | None = Field(default=None, description="Pin a version (default newest).")
    timezone: TimeZone = "UTC"
    input: dict[str, Any] = Field(default_factory=dict, description="Each run's input.")
    overlap: Overlap = Field(default="skip", description="While the last run is unfinished.")
    catch_up: Duration = Field(default="1d", description="Start missed ticks up to this late.")
    jitter: Duration = Field(default=0, description="Delay each tick by up to this much.")
    paused: bool = False


class ScheduleChange(Request):
    workflow: WorkflowName | None = None
    cron: Cron | None = None
    version: Version | None = None
    timezone: TimeZone | None = None
    input: dict[str, Any] | None = None
    overlap: Overlap | None = None
    catch_up: Duration | None = None
    jitter: Duration | None = None


# Epoch seconds from 1970 to the end of 2999: what a timestamp column holds, with room.
Instant = Annotated[float, Field(ge=0, le=32503680000)]


class BackfillRequest(Request):
    start: Instant = Field(description="From this time (epoch seconds), included.")
    end: Instant = Field(description="To this time (epoch seconds), not included.")


# -- principals, keys, the audit log ---------------------------------------------------

RoleName = Literal["viewer", "approver", "operator", "admin"]


class PrincipalRequest(Request):
    name: Annotated[
        str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]*$")
    ]
    role: RoleName
    payloads: bool = Field(
        default=False, description="May it read payloads (inputs, state, messages)?"
    )


class MintRequest(Request):
    expires_in_s: Annotated[float, Field(gt=0, le=10 * 365 * 86400)] | None = Field(
        default=None, description="It stops working this long from now (default: never)."
    )


class RotateRequest(Request):
    grace_s: Annotated[float, Field(ge=0, le=30 * 86400)] = Field(
        default=0.0, description="How long the old key keeps working."
    )


class ForkList(BaseModel):
    forks: list[dict[str, Any]]


class AnomalyList(BaseModel):
    anomalies: list[dict[str, Any]]
