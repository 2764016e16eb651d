"""What the world hears of an anomaly: a log line, the fleet-wide counter
``cairn_anomalies_total``, and a Sentry alert when the run was stopped (not for an
intervention) — from the decisions of a run the decider really caught."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import sentry_sdk

from cairn.decider.graph import Decision
from cairn.lease.memory import MemoryLeases
from cairn.model.commands import ReportAnomaly
from cairn.model.state import RunState
from cairn.observe.alerts import report_anomalies
from cairn.observe.sentry import init_sentry, report_anomaly
from tests.support.embedded import settings
from tests.unit.test_anomaly import STUCK, Recorder, agent
from tests.unit.test_lease_metrics import scrape
from tests.unit.test_sentry import Captured


@pytest.fixture
def captured() -> Iterator[Captured]:
    transport = Captured()
    yield transport
    sentry_sdk.get_global_scope().set_client(None)  # off again, for the other tests


def _caught_run() -> Recorder:
    driver = Recorder(agent({**STUCK, "on_detect": {"interventions": 1}}))
    driver.start()
    driver.loop()
    return driver


def test_each_anomaly_is_logged_and_counted_fleet_wide(caplog: pytest.LogCaptureFixture) -> None:
    driver = _caught_run()
    leases = MemoryLeases()
    caplog.set_level(logging.WARNING, logger="cairn.anomaly")
    reported = [report_anomalies("run-1", d, leases.count) for d in driver.decisions]
    assert sum(reported) == 2
    samples = scrape(leases)
    assert (
        samples['cairn_anomalies_total{action="intervened",kind="no_progress",workflow="agent"}']
        == 1
    )
    assert (
        samples['cairn_anomalies_total{action="failed",kind="no_progress",workflow="agent"}'] == 1
    )
    messages = [r.getMessage() for r in caplog.records if r.name == "cairn.anomaly"]
    assert len(messages) == 2
    assert messages[0].startswith("run run-1 (agent): anomaly no_progress at ")
    assert ", intervened: 4 moves in a row left the state unchanged" in messages[0]
    assert ", failed: " in messages[1]


def test_no_anomaly_no_series_and_a_failing_counter_changes_nothing() -> None:
    leases = MemoryLeases()
    assert not any(name.startswith("cairn_anomalies") for name in scrape(leases))

    def broken(name: str) -> None:
        raise ConnectionError("redis is gone")

    decision = Decision(
        RunState("r", "agent", 1), (ReportAnomaly("ping_pong", "intervened", "think", "x"),)
    )
    assert report_anomalies("r", decision, broken) == 1  # the step stands; only the count is lost
    assert report_anomalies("r", Decision(RunState("r", "agent", 1))) == 0


def test_a_stopped_run_alerts_sentry_and_an_intervention_does_not(
    tmp_path: Path, captured: Captured
) -> None:
    assert init_sentry(settings(tmp_path), transport=captured)
    driver = _caught_run()
    for decision in driver.decisions:
        report_anomalies("run-1", decision)
    sentry_sdk.flush()
    (event,) = captured.events
    failed = driver.state.anomalies[-1]
    assert event["level"] == "error"
    assert event["message"] == f"anomaly:no_progress in agent: {failed['detail']}"
    assert event["tags"] == {
        "run_id": "run-1",
        "workflow": "agent",
        "node": failed["node"],
        "anomaly": "no_progress",
        "action": "failed",
    }
    assert event["fingerprint"] == ["cairn-anomaly", "agent", "no_progress"]
    assert event["contexts"]["anomaly"]["detail"] == failed["detail"]


def test_a_hand_off_is_a_warning(tmp_path: Path, captured: Captured) -> None:
    assert init_sentry(settings(tmp_path), transport=captured)
    sent = report_anomaly(
        "r", "agent", node="think", kind="ping_pong", action="handed_off", detail="A -> B"
    )
    assert sent
    assert not report_anomaly(
        "r", "agent", node="think", kind="ping_pong", action="intervened", detail="A -> B"
    )
    sentry_sdk.flush()
    (event,) = captured.events
    assert event["level"] == "warning" and event["tags"]["action"] == "handed_off"


def test_without_sentry_nothing_is_sent() -> None:
    assert not report_anomaly(
        "r", "agent", node="think", kind="no_progress", action="failed", detail="x"
    )
