"""Errors to Sentry, tagged with the run, workflow and node they happened in.

Off unless ``CAIRN_SENTRY_DSN`` is set. A node execution gets its own scope with the
tags ``run_id``, ``workflow``, ``node``, ``iteration``, ``attempt`` and ``phase``, so an
error — a handler's permanent or business failure (a transient one is retried by the
node's policy and is not news yet), or cairn's own — arrives in Sentry saying which run
to look at. With Sentry off, a node pays one check. A run stopped for an anomaly (a loop
without progress, a ping-pong, an oscillation) is an alert of its own, grouped by
workflow and kind.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from cairn.config import Settings
from cairn.model.definition import ErrorClass
from cairn.model.messages import NodeMessage
from cairn.observe.logs import node_logging


def init_sentry(settings: Settings, *, transport: Any = None) -> bool:
    """Start reporting to Sentry if a DSN is configured (or a transport given, in tests);
    True if it is on."""
    dsn = settings.sentry_dsn.get_secret_value() if settings.sentry_dsn else None
    if dsn is None and transport is None:
        return False
    import sentry_sdk  # noqa: PLC0415 - see reporting()
    from sentry_sdk.integrations.celery import CeleryIntegration  # noqa: PLC0415

    from cairn import __version__  # noqa: PLC0415 - cairn imports this module's users

    sentry_sdk.init(
        dsn=dsn,
        transport=transport,
        environment=settings.sentry_environment,
        release=f"cairn@{__version__}",
        # The node runner reports its failures itself, tagged; Celery's own report of
        # the same exception would be a duplicate without the tags.
        disabled_integrations=[CeleryIntegration()],
    )
    return True


def reporting() -> bool:
    """Whether Sentry is on in this process. A process that never imported the SDK
    cannot have started it — neither by :func:`init_sentry` nor by a handlers' module
    of its own — so its import (a tenth of a second at every process's start) is left
    to the processes that report."""
    sdk = sys.modules.get("sentry_sdk")
    return sdk is not None and bool(sdk.get_client().is_active())


@contextmanager
def node_scope(message: NodeMessage) -> Iterator[None]:
    """Tag what is reported while this node executes: to Sentry, and in the log lines
    (:func:`cairn.observe.logs.node_logging`)."""
    with node_logging(message), _sentry_scope(message):
        yield


@contextmanager
def _sentry_scope(message: NodeMessage) -> Iterator[None]:
    if not reporting():
        yield
        return
    import sentry_sdk  # noqa: PLC0415 - imported already: see reporting()

    with sentry_sdk.isolation_scope() as scope:
        scope.set_tag("run_id", message.run_id)
        scope.set_tag("workflow", message.workflow)
        scope.set_tag("node", message.node)
        scope.set_tag("iteration", message.iteration)
        scope.set_tag("attempt", message.attempt)
        scope.set_tag("phase", message.phase.value)
        yield


def report_failure(error: BaseException, error_class: ErrorClass) -> None:
    """A handler failed: worth a Sentry event unless its retry policy is on it."""
    if error_class is not ErrorClass.TRANSIENT and reporting():
        import sentry_sdk  # noqa: PLC0415 - imported already: see reporting()

        sentry_sdk.capture_exception(error)


# What the decider did about an anomaly (cairn.decider.watch): an intervention is
# the run helping itself, like a transient failure's retry, and is not news yet.
_ANOMALY_LEVELS: dict[str, Literal["error", "warning"]] = {
    "failed": "error",
    "handed_off": "warning",
}


def report_anomaly(
    run_id: str, workflow: str, *, node: str, kind: str, action: str, detail: str
) -> bool:
    """A run was stopped (failed, or handed to a person) for an anomaly: alert, grouped
    by workflow and kind rather than by the text, which names fingerprints. True if an
    event was sent."""
    level = _ANOMALY_LEVELS.get(action)
    if level is None or not reporting():
        return False
    import sentry_sdk  # noqa: PLC0415 - imported already: see reporting()

    with sentry_sdk.isolation_scope() as scope:
        scope.set_tag("run_id", run_id)
        scope.set_tag("workflow", workflow)
        scope.set_tag("node", node)
        scope.set_tag("anomaly", kind)
        scope.set_tag("action", action)
        scope.set_context("anomaly", {"kind": kind, "action": action, "detail": detail})
        scope.fingerprint = ["cairn-anomaly", workflow, kind]
        sentry_sdk.capture_message(f"anomaly:{kind} in {workflow}: {detail}", level=level)
    return True


def report_circuit(dependency: str, change: str, *, run_id: str, node: str) -> bool:
    """A dependency's circuit opened (an outage: error), opened again after a failed probe
    (warning), or closed (info): grouped by dependency. True if an event was sent."""
    if not reporting():
        return False
    level: Literal["error", "warning", "info"] = {"opened": "error", "reopened": "warning"}.get(
        change, "info"
    )  # type: ignore[assignment]
    import sentry_sdk  # noqa: PLC0415 - imported already: see reporting()

    with sentry_sdk.isolation_scope() as scope:
        scope.set_tag("dependency", dependency)
        scope.set_tag("circuit", change)
        scope.set_tag("run_id", run_id)
        scope.set_tag("node", node)
        scope.fingerprint = ["cairn-circuit", dependency]
        sentry_sdk.capture_message(f"circuit of {dependency} {change}", level=level)
    return True
