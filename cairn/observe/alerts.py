"""What the outside world hears of an anomaly the decider caught (see
:mod:`cairn.decider.watch`): a log line, the fleet-wide counter
``cairn_anomalies_total{workflow,kind,action}``, and a Sentry alert when the run was
stopped. The decider only says so (:class:`~cairn.model.commands.ReportAnomaly`);
the engine calls :func:`report_anomalies` once the decision is committed, so that an
anomaly is reported once per decision that stands, never for one rolled back.

The counter lives with the lease counters (``Leases.count``: a Redis hash, fleet-wide,
prefork children included), which the workers and schedulers serve at ``/metrics``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cairn.decider.graph import Decision
from cairn.model.commands import ReportAnomaly
from cairn.observe.metrics.leases import anomaly_counter
from cairn.observe.sentry import report_anomaly

log = logging.getLogger("cairn.anomaly")


def report_anomalies(
    run_id: str, decision: Decision, count: Callable[[str], None] | None = None
) -> int:
    """Log, count (with ``count``, e.g. ``leases.count``) and alert each anomaly the
    decision reports; how many there were."""
    workflow = decision.state.workflow
    reported = 0
    for command in decision.commands:
        if not isinstance(command, ReportAnomaly):
            continue
        reported += 1
        log.warning(
            "run %s (%s): anomaly %s at %s, %s: %s",
            run_id,
            workflow,
            command.kind,
            command.node,
            command.action,
            command.detail,
        )
        if count is not None:
            try:
                count(anomaly_counter(workflow, command.kind, command.action))
            except Exception:  # the step is committed; a lost count must not undo that
                log.warning("could not count anomaly %s of run %s", command.kind, run_id)
        report_anomaly(
            run_id,
            workflow,
            node=command.node,
            kind=command.kind,
            action=command.action,
            detail=command.detail,
        )
    return reported


__all__ = ["report_anomalies"]
