"""One settings object, read from ``CAIRN_*`` environment variables.

Defaults run on a laptop with no services: a SQLite file under ``CAIRN_HOME`` and an
in-process broker and leases. Setting ``CAIRN_DATABASE_URL``, ``CAIRN_REDIS_URL`` and
``CAIRN_BROKER_URL`` moves the same commands onto PostgreSQL, Redis and Celery.

A ``CAIRN_*`` variable that is not a setting is an error, not silently ignored: a typo
in ``CAIRN_LEASE_TLL`` must not leave a fleet on a default nobody chose.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from cairn.config.builds import BuildSettings
from cairn.config.clients import ClientSettings
from cairn.config.oidc import OidcSettings
from cairn.config.workers import WorkerSettings
from cairn.errors import ConfigError
from cairn.model.queues import queue_name_problem

ENV_PREFIX = "CAIRN_"
# The test suite's own variables (CAIRN_TEST_POSTGRES, ...): never settings, so a shell
# that exports them for the tests can still run cairn.
TEST_PREFIX = "CAIRN_TEST_"
# In a per-workflow setting ("0.99,weekly_report=0.95"), the value for every other workflow.
EVERY_WORKFLOW = "*"


class Settings(OidcSettings, WorkerSettings, BuildSettings, ClientSettings):
    """Build with :meth:`from_env` (or directly, in tests and embedding code). A plain
    model rather than pydantic-settings: the mapping given to ``from_env`` is the only
    source, so settings built for another process never pick up this one's variables.
    The settings of sign-in through OpenID Connect are declared in :mod:`cairn.config.oidc`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    home: Path = Field(
        default=Path.home() / ".cairn", description="Where the embedded default keeps its files."
    )
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; unset means SQLite under CAIRN_HOME."
    )
    redis_url: str | None = Field(
        default=None, description="Redis for leases and heartbeats; unset means in-process."
    )
    broker_url: str | None = Field(
        default=None, description="Celery broker; unset means an in-process broker."
    )
    workflows: list[str] = Field(
        default_factory=list,
        description="Comma-separated definition files, directories and Python modules.",
    )
    workflows_namespace: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
        description="The namespace the definitions of CAIRN_WORKFLOWS are registered into.",
    )
    log_level: str = Field(default="INFO", description="Python logging level.")
    log_format: Literal["text", "json"] = Field(
        default="text", description="Log lines for people (text) or one JSON object a line."
    )
    log_tasks: bool = Field(
        default=False, description="Log Celery's line for every task received and finished."
    )
    queue: str = Field(default="cairn", description="Celery queue for node tasks.")
    queues: list[str] = Field(
        default_factory=list,
        description="Comma-separated queues this deployment's workers consume besides "
        "CAIRN_QUEUE (`cairn worker --queues`): registering a definition that sends a node "
        "to any other queue is refused; unset: any queue is accepted.",
    )
    worker_threads: int = Field(
        default=2, ge=1, le=256, description="Threads running nodes in an embedded process."
    )
    lease_ttl: float = Field(default=30.0, gt=0, description="Lease time to live, seconds.")
    heartbeat_interval: float = Field(
        default=10.0, gt=0, description="Lease renewal period, seconds (at most TTL/3)."
    )
    timeout_grace: float = Field(
        default=10.0,
        gt=0,
        description="How long past its node's timeout a handler may run after being told to "
        "stop, seconds; then the worker process running it is replaced (prefork pool).",
    )
    snapshot_every_events: int = Field(
        default=50, ge=1, description="Write a snapshot after this many events."
    )
    snapshot_every_s: float = Field(
        default=60.0, gt=0, description="...or when the last one is this old, seconds."
    )
    snapshot_compress_bytes: int = Field(
        default=16_384, ge=0, description="Compress snapshots larger than this."
    )
    state_cache_bytes: int = Field(
        default=65_536,
        ge=0,
        description="Cache a run's current state on its row up to this size (0: never).",
    )
    snapshot_keep: int = Field(
        default=3, ge=1, description="Newest snapshots kept per run by compaction."
    )
    max_payload_bytes: int = Field(
        default=1_048_576, ge=1024, description="Largest input, output or signal payload."
    )
    namespace_concurrency: int = Field(
        default=0,
        ge=0,
        description="At most this many node executions run at once per namespace; the rest "
        "wait, parked, for a slot (0: no limit). See docs/flow-control.md.",
    )
    rate_output_tokens: int = Field(
        default=1024,
        ge=0,
        description="Under a tokens rate limit, a model call that does not say how much it "
        "may answer (max_tokens) reserves this many output tokens besides its prompt's "
        "estimate, until its usage is known. See docs/flow-control.md.",
    )
    rate_pause: float = Field(
        default=1.0,
        gt=0,
        description="A provider's 429 without Retry-After pauses the call's rate keys this "
        "long, seconds (doubled at each further refusal of the call).",
    )
    rate_max_refusals: int = Field(
        default=5,
        ge=0,
        description="A rate-limited model call refused (429) more often than this fails "
        "as a transient error (the node's retry policy applies).",
    )
    namespace_weights: dict[str, int] = Field(
        default_factory=dict,
        description="Each namespace's share of the workers when several have work queued, as "
        "weights: 'acme=3,beta=1' (a namespace not named: 1). See docs/flow-control.md.",
    )
    continue_steps: bool = Field(
        default=True,
        description="A worker runs a step's successor (the first of a fork's; same "
        "queue and priority, no limit) itself, not through the broker; off: every step is a "
        "task of its own.",
    )
    fairness: bool = Field(
        default=True,
        description="Order each queue's node messages so that a namespace with few queued "
        "overtakes one with a backlog (needs a Redis broker); off: first in, first out "
        "within a priority.",
    )
    model_inline_bytes: int = Field(
        default=65_536,
        ge=1024,
        description="A model call's message or response larger than this (JSON) is kept in "
        "the artifact store, the record holding its reference.",
    )
    outbox_relay_after: float = Field(
        default=5.0, gt=0, description="Relay outbox rows unsent for this long, seconds."
    )
    recovery_after: float = Field(
        default=60.0,
        gt=0,
        description="Re-dispatch an unfinished node with no lease after this long, seconds.",
    )
    max_recoveries: int = Field(
        default=3,
        ge=1,
        description="Recoveries of one execution whose worker died before auto-recovery "
        "stops: a node that kills its worker every time must not loop.",
    )
    on_max_recoveries: Literal["fail", "hold"] = Field(
        default="fail",
        description="What happens at max_recoveries: 'fail' (reason max_attempts; the "
        "node's error edge, or the run fails) or 'hold' (the run waits for an operator's "
        "recovery.retry / recovery.complete / recovery.fail signal).",
    )
    reconnect_within: float = Field(
        default=30.0,
        gt=0,
        description="How long a worker or scheduler retries (with backoff) through a "
        "PostgreSQL or Redis outage before giving a message back to the broker, seconds.",
    )
    scheduler_interval: float = Field(
        default=0.5, gt=0, description="Seconds between scheduler passes."
    )
    sentry_dsn: SecretStr | None = Field(
        default=None,
        description="Report errors to Sentry, tagged with run, workflow and node; unset: off.",
    )
    sentry_environment: str = Field(
        default="production", description="The Sentry environment errors are reported under."
    )
    run_retention_s: float = Field(
        default=0.0,
        ge=0,
        description="Runs that ended this many seconds ago are deleted with their history "
        "(events, snapshots, executions, timers) by the scheduler; 0 keeps them forever.",
    )
    effect_adapters: list[str] = Field(
        default_factory=list,
        description="Comma-separated 'name=module:attr' adapters that ask external systems "
        "whether an effect took place (see docs/effects.md).",
    )
    reconcile_grace: float = Field(
        default=60.0,
        gt=0,
        description="Seconds an effect may stay in intent (its call in flight) before the "
        "reconciler asks the external system about it.",
    )
    slo_success_rate: dict[str, float] = Field(
        default_factory=dict,
        description="`cairn sla` flags a workflow whose runs succeed (retries allowed) less "
        "often than this, 0..1: '0.99' for all, '0.99,weekly_report=0.95' to override one; "
        "unset: not checked.",
    )
    slo_first_try_rate: dict[str, float] = Field(
        default_factory=dict,
        description="...whose runs succeed with no step retried or recovered less often "
        "than this, 0..1 (same form).",
    )
    slo_p95_s: dict[str, float] = Field(
        default_factory=dict,
        description="...whose succeeded runs take longer than this end to end at the 95th "
        "percentile, seconds (same form).",
    )
    model_prices: dict[str, tuple[float, ...]] = Field(
        default_factory=dict,
        description="What ctx.model charges as `usd`: USD per million input/output tokens by "
        "model (a name, or the start of one), and optionally cached input tokens: "
        "'gpt-4.1-mini=0.4/1.6/0.1,claude-sonnet=3/15'; unset: tokens only.",
    )
    duplicate_deliveries: bool = Field(
        default=False,
        description="Tests only: publish every node message twice (at-least-once delivery, "
        "made certain).",
    )
    fault_points: list[str] = Field(
        default_factory=list,
        description="Tests only: comma-separated fault points where the process kills itself.",
    )
    clock_skew_s: float = Field(
        default=0.0,
        description="Tests only: shift this process's wall clock by this many seconds (a "
        "machine whose clock is off; no liveness decision may depend on it).",
    )
    task_events: bool = Field(
        default=False,
        description="Workers send Celery task events (what Flower shows). Off by default, as "
        "in Celery: they cost a Redis publish per task state; Flower switches them on at "
        "runtime, and `cairn worker --events` at start.",
    )
    visibility_timeout: float = Field(
        default=7200.0,
        gt=0,
        description="Broker redelivery timeout, seconds; longer than any node runs (the "
        "default node timeout is 1 h; a redelivery of a running node is turned away).",
    )
    liveness_interval: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between a Celery worker's pings to itself through the broker "
        "(the deaf-worker check read by `cairn probe worker`).",
    )
    liveness_file: Path | None = Field(
        default=None,
        description="Where a Celery worker records that it still consumes; unset: "
        "cairn-worker-<host>-<pid>.alive in the temp directory.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Serve the lease metrics for Prometheus on this port (worker, "
        "scheduler); unset: not served.",
    )
    artifacts_url: str | None = Field(
        default=None,
        description="Object store for artifact content: file:///path, "
        "s3://bucket/prefix[?endpoint_url=...&region=...] (pip install 'cairn[s3]'); "
        "unset: CAIRN_HOME/artifacts.",
    )
    artifacts_retention_days: float | None = Field(
        default=None,
        gt=0,
        description="`cairn artifacts-cleanup` deletes the artifacts of runs finished more "
        "than this many days ago; unset: kept.",
    )
    artifacts_orphan_grace_s: float = Field(
        default=3600.0,
        gt=0,
        description="Blobs no artifact names (a writer died before registering) are "
        "deleted by `cairn artifacts-cleanup` once this old, seconds.",
    )
    api_keys: SecretStr | None = Field(
        default=None,
        description="Bootstrap API keys of `cairn api`: comma-separated 'namespace:key'; each "
        "an admin of its namespace that may read payloads (docs/access.md). Other keys are "
        "minted with `cairn keys create`.",
    )
    api_keys_file: Path | None = Field(
        default=None,
        description="A file of further bootstrap keys, one 'namespace:key' a line (# comments).",
    )
    api_key_cache_s: float = Field(
        default=5.0,
        ge=0,
        description="How long an API process keeps a minted key's row before reading it "
        "again, seconds: a revoked key stops working within this long.",
    )
    console_session_s: float = Field(
        default=8 * 3600.0,
        gt=0,
        le=30 * 86400,
        description="How long a console sign-in lasts, seconds: the session then ends and "
        "the browser signs in again (docs/console.md#sessions).",
    )
    broker_submit: str | None = Field(
        default=None,
        description="Runs submitted through the broker's submit tasks are accepted as the "
        "principal 'broker:NAME' into NAMESPACE ('NAME@NAMESPACE'); unset, such submissions "
        "are refused (logged, acknowledged). The message cannot say who it is.",
    )
    api_max_body_bytes: int = Field(
        default=1_048_576, ge=1024, description="Largest request body `cairn api` accepts."
    )
    webhook_secrets: SecretStr | None = Field(
        default=None,
        description="Webhook signing secrets: comma-separated 'namespace:secret' (several for "
        "one namespace: each signs, for rotation). A run may name a webhook only if its "
        "namespace has a secret.",
    )
    webhook_secrets_file: Path | None = Field(
        default=None,
        description="A file of further webhook secrets, one 'namespace:secret' a line.",
    )
    webhook_hosts: list[str] = Field(
        default_factory=list,
        description="Comma-separated host patterns a webhook URL may name (fnmatch: "
        "'*.example.com'); empty: any host.",
    )
    webhook_allow_networks: list[str] = Field(
        default_factory=list,
        description="Comma-separated networks (CIDR, or single addresses) webhooks may "
        "reach although they are not public — private, loopback, link-local, shared: "
        "'10.20.0.0/16' for a receiver inside the cluster, '127.0.0.1' on a laptop; "
        "empty: public addresses only.",
    )
    webhook_timeout_s: float = Field(
        default=10.0, gt=0, description="How long one webhook delivery may take, seconds."
    )
    webhook_retry_base_s: float = Field(
        default=2.0,
        gt=0,
        description="The first webhook retry's delay; each later one doubles it (with jitter).",
    )
    webhook_retry_max_s: float = Field(
        default=3600.0, gt=0, description="The longest delay between webhook retries, seconds."
    )
    webhook_max_attempts: int = Field(
        default=20,
        ge=1,
        description="Deliveries of one notification before it is given up (over up to 9 h with "
        "the default delays).",
    )

    @field_validator(
        "workflows",
        "fault_points",
        "effect_adapters",
        "webhook_hosts",
        "webhook_allow_networks",
        "queues",
        mode="before",
    )
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("webhook_allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        networks = []
        for part in value:
            try:
                networks.append(str(ipaddress.ip_network(part)))
            except ValueError as exc:  # host bits set, too: "10.0.0.1/8" means which?
                raise ValueError(f"{part!r} is not a network (CIDR) or an address: {exc}") from exc
        return networks

    @field_validator("queues")
    @classmethod
    def _queue_names(cls, value: list[str]) -> list[str]:
        for name in value:
            problem = queue_name_problem(name)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError(f"unknown log level {value!r}")
        return level

    @field_validator("slo_success_rate", "slo_first_try_rate", "slo_p95_s", mode="before")
    @classmethod
    def _split_per_workflow(cls, value: Any) -> Any:
        if isinstance(value, str):
            return per_workflow(value)
        return value

    @field_validator("model_prices", mode="before")
    @classmethod
    def _prices(cls, value: Any) -> Any:
        """``"gpt-4.1-mini=0.4/1.6/0.1"`` → ``{"gpt-4.1-mini": (0.4, 1.6, 0.1)}``: input,
        output and (if given) cached input, USD per million tokens."""
        if not isinstance(value, str):
            return value
        prices: dict[str, tuple[float, ...]] = {}
        for part in (part.strip() for part in value.split(",") if part.strip()):
            model, _, rates = part.rpartition("=")
            try:
                price = tuple(float(rate) for rate in rates.split("/"))
            except ValueError:
                price = ()
            if len(price) not in {2, 3}:
                raise ValueError(
                    f"{part!r}: a price is MODEL=INPUT/OUTPUT (or INPUT/OUTPUT/CACHED) in USD "
                    "per million tokens"
                )
            if not model.strip() or not all(0 <= p < math.inf for p in price):
                raise ValueError(f"{part!r}: a model and non-negative prices")
            prices[model.strip()] = price
        return prices

    @field_validator("namespace_weights", mode="before")
    @classmethod
    def _weights(cls, value: Any) -> Any:
        """``"acme=3,beta=1"`` → ``{"acme": 3, "beta": 1}``."""
        if not isinstance(value, str):
            return value
        weights: dict[str, int] = {}
        for part in (part.strip() for part in value.split(",") if part.strip()):
            namespace, equals, weight = part.rpartition("=")
            namespace = namespace.strip()
            if not equals or not namespace or not weight.strip().isdigit():
                raise ValueError(f"{part!r}: a weight is NAMESPACE=N, N a whole number from 1")
            if namespace in weights:
                raise ValueError(f"namespace {namespace!r} is weighted twice")
            weights[namespace] = int(weight)
        return weights

    @field_validator("namespace_weights")
    @classmethod
    def _positive_weights(cls, value: dict[str, int]) -> dict[str, int]:
        for namespace, weight in value.items():
            if not 1 <= weight <= 1000:
                raise ValueError(
                    f"namespace {namespace!r}: a weight is from 1 to 1000, not {weight}"
                )
        return value

    @field_validator("slo_success_rate", "slo_first_try_rate")
    @classmethod
    def _rates(cls, value: dict[str, float]) -> dict[str, float]:
        for workflow, rate in value.items():
            if not 0 <= rate <= 1:
                raise ValueError(f"{_which(workflow)}: a rate is between 0 and 1, got {rate}")
        return value

    @field_validator("slo_p95_s")
    @classmethod
    def _positive_seconds(cls, value: dict[str, float]) -> dict[str, float]:
        for workflow, seconds in value.items():
            if not 0 < seconds < math.inf:
                raise ValueError(
                    f"{_which(workflow)}: seconds are positive and finite, got {seconds}"
                )
        return value

    @model_validator(mode="after")
    def _renew_often_enough(self) -> Settings:
        if self.heartbeat_interval * 3 > self.lease_ttl * (1 + 1e-9):  # 0.2 * 3 > 0.6 in floats
            raise ValueError(
                f"heartbeat_interval ({self.heartbeat_interval}s) must be at most a third of "
                f"lease_ttl ({self.lease_ttl}s): a lease is renewed at least three times per TTL"
            )
        return self

    @property
    def embedded(self) -> bool:
        """True without a database and a broker: SQLite and in-process execution.
        (A Redis URL alone only moves leases and heartbeats to Redis.)"""
        return self.database_url is None and self.broker_url is None

    @property
    def effective_database_url(self) -> str:
        """``CAIRN_DATABASE_URL``, or the embedded SQLite file under ``CAIRN_HOME``."""
        return self.database_url or f"sqlite:///{self.home / 'cairn.db'}"

    @property
    def effective_artifacts_url(self) -> str:
        """``CAIRN_ARTIFACTS_URL``, or the folder ``artifacts`` under ``CAIRN_HOME``."""
        return self.artifacts_url or (self.home / "artifacts").resolve().as_uri()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read settings; raise :class:`ConfigError` on unknown variables or bad values."""
        environ = os.environ if environ is None else environ
        known = {f"{ENV_PREFIX}{name.upper()}" for name in cls.model_fields}
        unknown = sorted(
            key
            for key in environ
            if key.startswith(ENV_PREFIX) and not key.startswith(TEST_PREFIX) and key not in known
        )
        if unknown:
            hints = []
            names = sorted(name.removeprefix(ENV_PREFIX) for name in known)
            for key in unknown:  # compare without the shared prefix, which matches everything
                close = difflib.get_close_matches(key.removeprefix(ENV_PREFIX), names, n=1)
                hints.append(f"{key} (did you mean {ENV_PREFIX}{close[0]}?)" if close else key)
            raise ConfigError(
                f"unknown setting(s): {', '.join(hints)}; known: {', '.join(sorted(known))}"
            )
        values = {
            name: environ[f"{ENV_PREFIX}{name.upper()}"]
            for name in cls.model_fields
            if f"{ENV_PREFIX}{name.upper()}" in environ
        }
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(f"{_variable(err['loc'])}: {err['msg']}" for err in exc.errors())
            raise ConfigError(f"invalid settings: {problems}") from exc

    def describe(self) -> dict[str, Any]:
        """Effective settings for display, with passwords in URLs masked."""
        data = self.model_dump(mode="json")
        data["effective_database_url"] = self.effective_database_url
        for key in ("database_url", "redis_url", "broker_url", "effective_database_url"):
            if data.get(key):
                data[key] = _mask_password(data[key])
        return data


def per_workflow(text: str) -> dict[str, str]:
    """``"0.99,weekly_report=0.95"`` → ``{"*": "0.99", "weekly_report": "0.95"}``: a value
    for every workflow and overrides by name, in one variable (values stay text for the
    field's own type to check)."""
    values: dict[str, str] = {}
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        workflow, named, value = part.rpartition("=")
        key = workflow.strip() if named else EVERY_WORKFLOW
        if not key:
            raise ValueError(f"{part!r} names no workflow before '='")
        if key in values:
            raise ValueError(f"{_which(key)} is given twice")
        values[key] = value.strip()
    return values


def _which(key: str) -> str:
    return "the default" if key == EVERY_WORKFLOW else f"workflow {key!r}"


def _variable(location: tuple[int | str, ...]) -> str:
    """The variable a validation error is about (a cross-field check has no location)."""
    return f"{ENV_PREFIX}{location[0]}".upper() if location else "settings"


def _mask_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


__all__ = ["ENV_PREFIX", "EVERY_WORKFLOW", "Settings", "per_workflow"]
