"""What the HTTP API answers with: one definition of each response body, served by
:mod:`cairn.api` and parsed by :mod:`cairn.http`'s clients.

Only pydantic here — no engine, no database, no web framework — so that a service that
talks to cairn over HTTP imports what it reads and nothing else. Unknown fields are
ignored when parsing, so a client keeps working against a newer API that answers more.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Answer(BaseModel):
    """Every response body's base. Its validators are built when a body of the kind is
    first parsed or served, not when this module is imported: a command line that reads
    one kind of answer does not pay for forty."""

    model_config = ConfigDict(defer_build=True)


class Submitted(Answer):
    run_id: str
    status_url: str


class Forked(Submitted):
    parent_run_id: str
    fork_seq: int


class BatchResult(Answer):
    index: int
    run_id: str | None = None
    status_url: str | None = None
    created: bool | None = None
    error: dict[str, str] | None = None


class BatchResponse(Answer):
    created: int
    existing: int
    refused: int
    results: list[BatchResult]


class RunSummary(Answer):
    id: str
    workflow: str
    version: int
    status: str
    request_id: str | None
    current: list[str]
    reason: str | None
    last_seq: int
    created_at: float = Field(description="Epoch seconds.")
    updated_at: float = Field(description="Epoch seconds.")


class RunPage(Answer):
    runs: list[RunSummary]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


class StatusCount(Answer):
    count: int = Field(description="Runs in this status, exact up to the cap.")
    more: bool = Field(description="True: more than ``count`` (the cap) — not counted.")


class RunCounts(Answer):
    counts: dict[str, StatusCount] = Field(description="By status.")
    cap: int = Field(description="No count goes past this: it says `more` instead.")


class Progress(Answer):
    steps: int = Field(description="Decisions taken so far (events applied).")
    done: int = Field(description="Distinct task nodes that have succeeded.")
    total: int = Field(
        description="Task nodes in the definition: an upper bound, since branches not "
        "taken never run (and loops revisit nodes)."
    )


class RunDetail(RunSummary):
    parent_run_id: str | None = Field(
        default=None, description="A fork's parent run (POST /v1/runs/{id}/fork)."
    )
    fork_seq: int | None = Field(default=None, description="The parent's seq it forked at.")
    webhooks: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The run's webhook notifications: event_id, type, state (delivered, "
        "pending, given_up), attempts, next_attempt_at, the receiver's last status/error.",
    )
    namespace: str
    workflow_namespace: str = Field(
        default="default",
        description="Whose definition it runs: its own namespace's, or the one that shared "
        "the workflow with it.",
    )
    priority: int = Field(default=0, description="-5..5, higher first.")
    build: str | None = Field(
        default=None, description="The build it started on (docs/versions.md)."
    )
    waiting_for_build: str | None = Field(
        default=None,
        description="The build it waits for a worker of: its workflow routes its nodes by "
        "build and no live worker runs them (it waits; it has not failed).",
    )
    nodes: dict[str, str]
    visits: dict[str, int]
    progress: Progress
    heartbeats: dict[str, dict[str, Any] | None] = Field(
        description="Each running execution's last heartbeat (None: none yet): worker, "
        "done/total/message as the handler reports them, age_s since the beat, "
        "eta_s, the seconds left at the rate of progress so far (None without a total), "
        "no_progress_s since the last progress, and stalled (past its node's stall_after)."
    )
    heartbeat_interval_s: float | None = Field(
        default=None,
        description="How often this deployment's workers beat: a running node is suspect "
        "after three missed beats.",
    )
    last_event: dict[str, Any] | None
    vars: dict[str, Any] | None = Field(
        description="The run's state (null without the payloads permission)."
    )
    result: dict[str, Any] | None = Field(
        description="The final state, once succeeded (null without the payloads permission)."
    )
    waiting: list[dict[str, Any]] = Field(description="What would answer each wait.")
    explain: list[str]
    executions: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Every execution of its nodes: node, iteration, phase, status, attempt, "
        "worker, duration_s, error (null without the payloads permission).",
    )
    links: dict[str, str]


class EventPage(Answer):
    events: list[dict[str, Any]]
    next_after: int = Field(description="Pass as ?after= for the next page.")


class SignalResult(Answer):
    run_id: str
    applied: bool = Field(description="False if this signal id was applied before.")
    status: str


class CancelResult(Answer):
    run_id: str
    changed: bool = Field(description="False if the run was already being cancelled.")
    status: str


class WaitingList(Answer):
    waiting: list[dict[str, Any]] = Field(
        description="Each execution waiting for a person, longest waiting first: run_id, "
        "node, iteration, phase, signals, since, times_out_at, reason (a held node's), "
        "approvers, quorum, votes, context (only to whoever may decide it, or read payloads)."
    )


class ArtifactList(Answer):
    artifacts: list[dict[str, Any]]


class ModelCallList(Answer):
    calls: list[dict[str, Any]]
    messages: dict[str, Any]


class WorkflowInfo(Answer):
    namespace: str = Field(description="The namespace that owns it.")
    name: str
    version: int
    registered_at: float
    shared: bool = Field(description="Another namespace's, shared with this one.")


class WorkflowList(Answer):
    workflows: list[WorkflowInfo]


class WorkflowDetail(Answer):
    namespace: str = Field(description="The namespace that owns it.")
    name: str
    version: int
    format: int = Field(description="The definition format it was registered under.")
    shared: bool
    spec: dict[str, Any] = Field(description="The definition, as registered.")


class VersionInfo(Answer):
    version: int
    registered_at: float | None = Field(
        description="Epoch seconds; null for a version another namespace registered and shares."
    )
    newest: bool = Field(description="New runs start on it.")
    in_flight: int = Field(description="Its runs not yet finished.")
    waiting: int = Field(description="Of them, those waiting (a signal, a timer, a person).")
    oldest_at: float | None = Field(description="When the oldest run in flight was created.")
    drained: bool = Field(description="No run of it is in flight.")
    builds: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Its runs in flight by the build they started on: build, in_flight, "
        "waiting, oldest_at.",
    )
    patches: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Per patch marker its runs in flight answered: answered_true, "
        "answered_false, unanswered, needs_old_path, old_path_runs "
        "(docs/versions.md#patch-markers).",
    )


class WorkflowVersionsInfo(Answer):
    workflow: str = Field(description="Its name; namespace/name for one shared with this one.")
    in_flight: int
    versions: list[VersionInfo]


class BuildInfo(Answer):
    build: str
    first_at: float = Field(description="When a worker first announced it (epoch seconds).")
    last_at: float = Field(description="When a worker last announced it.")
    live: bool = Field(description="Announced within the live window: its workers are up.")
    workflows: list[str] = Field(description="The workflow versions it runs (name@version).")
    compatible: list[str] = Field(description="The earlier builds it can take over.")
    needed_by: int = Field(
        description="Runs in flight (every namespace's) whose next node only it may run."
    )
    safe_to_retire: bool = Field(description="No run in flight needs it.")


class VersionList(Answer):
    workflows: list[WorkflowVersionsInfo]
    builds: list[BuildInfo] = Field(
        default_factory=list, description="The builds the fleet's workers announced, newest first."
    )


class Registered(Answer):
    namespace: str
    name: str
    version: int
    created: bool = Field(description="False: registered already, identically.")


class ShareView(Answer):
    namespace: str = Field(description="The owner's namespace.")
    workflow: str
    grantee: str = Field(description="The namespace it is shared with.")
    version: int | None = Field(description="None: every version.")
    created_at: float
    created_by: str


class ShareList(Answer):
    shares: list[ShareView]


# -- an operator's view of one run: its history, its state at a seq, what changed -------


class Report(Answer):
    """A report whose fields are the engine's (see each endpoint): read as a mapping."""

    model_config = ConfigDict(extra="allow")


class HistoryView(Report):
    run_id: str
    workflow: str
    version: int
    status: str
    last_seq: int
    steps: list[dict[str, Any]]
    events: list[dict[str, Any]] = Field(description="The run's events that are not steps.")


class StateView(Answer):
    run_id: str
    seq: int = Field(description="The state is the run's after this event.")
    state: dict[str, Any]


class DiffView(Answer):
    run_id: str
    from_seq: int
    to_seq: int
    changes: list[dict[str, Any]] = Field(description="Each changed path: old, new, change.")


class ReplayView(Report):
    run_id: str
    diverged: bool
    steps: list[dict[str, Any]]


class DryRunView(Report):
    run_id: str
    ending: str = Field(description="ended, parked, refused, step_cap or child_run.")
    status: str
    went_well: bool = Field(description="It ended succeeded, or parked at a wait.")
    steps: list[dict[str, Any]]


# -- repairs: rollback, the effects ledger, reconciliation ------------------------------


class Compensation(Answer):
    node: str
    iteration: int
    compensation: str | None = Field(description="The handler it runs (module:function).")


class RollbackPlan(Answer):
    run_id: str
    compensations: list[Compensation] = Field(
        description="What the rollback runs, in order: the last step that took effect "
        "first. Steps still running may yet take effect before they stop: undone too."
    )


class RolledBack(RollbackPlan):
    status: str


class MigrationView(Report):
    """``POST /v1/runs:migrate``: per run, where it stands and where it goes or why it
    does not (docs/versions.md); a dry run writes nothing."""


class MigrationUndone(Answer):
    run_id: str
    version: int = Field(description="The version the run is back on.")
    status: str
    seq: int = Field(description="The seq of the event that undid the migration.")


class EffectList(Answer):
    effects: list[dict[str, Any]]


class EffectView(Answer):
    effect: dict[str, Any]


class DriftView(Report):
    checked: int
    consistent: int
    fixed: list[dict[str, Any]]
    needs_human: list[dict[str, Any]]


# -- bulk actions --------------------------------------------------------------------------


class BulkResult(Answer):
    action: str
    dry_run: bool
    matched: int = Field(description="How many runs the filter selects.")
    selection: str = Field(
        description="The selected runs' token: send it back as `selection` to act on exactly "
        "these (409 selection_changed if the filter selects others by then)."
    )
    run_ids: list[str]
    done: list[dict[str, Any]] = Field(description="Each run acted on, and how it ended up.")
    refused: list[dict[str, Any]] = Field(
        description="Each run that could not take the action: its run_id, code and message."
    )


# -- pauses --------------------------------------------------------------------------------


class PauseView(Answer):
    kind: str = Field(description="`workflow` (its new starts) or `queue` (its node messages).")
    name: str
    namespace: str
    reason: str
    paused_by: str
    paused_at: float
    held: int = Field(description="Runs a workflow's pause holds (0 for a queue).")


class PauseList(Answer):
    pauses: list[PauseView]


class Paused(Answer):
    pause: PauseView
    created: bool = Field(description="False: it was paused already (that pause stands).")


class Resumed(Answer):
    kind: str
    name: str
    started: int = Field(description="Held runs started (a workflow's); 0 for a queue.")


# -- schedules ------------------------------------------------------------------------------


class ScheduleView(Answer):
    name: str
    namespace: str | None = None
    workflow: str
    version: int | None
    cron: str
    timezone: str
    input: dict[str, Any] | None = Field(
        description="What its runs start with (null without the payloads permission)."
    )
    overlap: str
    catch_up_s: float
    jitter_s: float
    paused: bool
    next_at: float | None = Field(description="When the next tick is due (epoch seconds).")
    last_tick_at: float | None = Field(description="The last tick that started a run.")
    last_run_id: str | None
    buffered_at: float | None = Field(description="A tick waiting for the last run to end.")
    skipped: int = Field(description="Ticks skipped: too late to catch up, or by overlap.")
    last_error: str | None
    created_at: float
    updated_at: float
    runs: list[dict[str, str]] | None = Field(
        default=None, description="The runs its ticks started lately (GET one schedule)."
    )


class ScheduleList(Answer):
    schedules: list[ScheduleView]


class BackfillResult(Answer):
    ticks: int
    created: int = Field(description="Runs started now.")
    existing: int = Field(description="Ticks that had their run already.")
    run_ids: list[str]


# -- principals, keys, the audit log -------------------------------------------------------


class PrincipalView(Answer):
    name: str
    role: str
    payloads: bool
    kind: str
    created_at: float
    created_by: str


class MintedKeyView(Answer):
    key_id: str
    key: str = Field(description="The whole key: shown this once, stored nowhere.")
    principal: str
    namespace: str
    role: str
    expires_at: float | None


class KeyView(Answer):
    key_id: str
    principal: str
    role: str
    payloads: bool
    created_at: float
    expires_at: float | None
    revoked_at: float | None


class KeyList(Answer):
    principals: list[PrincipalView]
    keys: list[KeyView]


class AuditPage(Answer):
    entries: list[dict[str, Any]]
    next_after: int = Field(description="Ask with after= this for the next page.")
