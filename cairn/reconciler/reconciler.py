"""One reconciliation pass (``cairn reconcile``, a Kubernetes CronJob).

The external system is the source of truth; the ledger is cairn's view of it. Each pass
looks at intents older than the grace period (their caller may have died between the
call and recording its outcome) and at applied effects never checked, asks each effect
type's adapter, and repairs by rule:

==================  ==================  =================================================
ledger              external system     what the pass does
==================  ==================  =================================================
intent              applied             record it applied, with the external record
                                        (backfill: a timing gap, fixed)
intent              absent              mark it ``absent``: it never took effect, and a
                                        retry of its node may call again (fixed)
applied             applied             note it checked
applied             absent              by the effect's policy: ``reapply`` through the
                                        adapter, ``compensate``, or ``flag`` it for a
                                        person (a business discrepancy)
either              unknown             leave it, report it for a person
==================  ==================  =================================================

Each effect is claimed with ``FOR UPDATE SKIP LOCKED`` for the length of its check and
repair, and every repair is a conditional update: two reconcilers at once (or one beside
a worker resolving the same intent) never repair an effect twice. A pass is idempotent:
what it fixed is no longer a candidate.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from cairn.effects.adapters import Check, Effect, Verdict, adapter_for, checked
from cairn.effects.ledger import EffectStatus, Policy, applied
from cairn.orchestrator.definition import import_ref
from cairn.store.repository import Store, Tx, utcnow

log = logging.getLogger(__name__)

BATCH = 500


@dataclass
class DriftReport:
    """What one pass found: timing gaps it fixed apart from discrepancies for a person."""

    at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    checked: int = 0
    consistent: int = 0
    fixed: list[dict[str, Any]] = field(default_factory=list)
    needs_human: list[dict[str, Any]] = field(default_factory=list)
    no_adapter: list[str] = field(default_factory=list)  # effect types nobody can check
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "checked": self.checked,
            "consistent": self.consistent,
            "fixed": self.fixed,
            "needs_human": self.needs_human,
            "no_adapter": sorted(set(self.no_adapter)),
            "counts": {
                "fixed": dict(Counter(entry["action"] for entry in self.fixed)),
                "needs_human": dict(Counter(entry["reason"] for entry in self.needs_human)),
            },
            "seconds": round(self.seconds, 3),
        }

    def write_metrics(self, path: Path) -> None:
        """Prometheus text format, for node-exporter's textfile collector (a CronJob has
        no endpoint to scrape)."""
        registry = CollectorRegistry()
        Gauge("cairn_reconcile_checked", "Effects checked by the last pass", registry=registry).set(
            self.checked
        )
        fixed = Gauge(
            "cairn_reconcile_fixed",
            "Timing gaps the last pass repaired, by action",
            ["action"],
            registry=registry,
        )
        for action, count in Counter(entry["action"] for entry in self.fixed).items():
            fixed.labels(action).set(count)
        drift = Gauge(
            "cairn_reconcile_drift",
            "Discrepancies the last pass left for a person, by reason",
            ["reason"],
            registry=registry,
        )
        for reason, count in Counter(entry["reason"] for entry in self.needs_human).items():
            drift.labels(reason).set(count)
        Gauge(
            "cairn_reconcile_last_run_timestamp_seconds",
            "When the last pass finished",
            registry=registry,
        ).set(time.time())
        write_to_textfile(str(path), registry)


@dataclass
class Reconciler:
    store: Store
    grace_s: float = 60.0

    def run_once(self, limit: int = BATCH) -> DriftReport:
        started = time.monotonic()
        report = DriftReport()
        with self.store.transaction() as tx:
            candidates = tx.effects_to_check(tx.now() - self.grace_s, limit)
        for effect_id in candidates:
            with self.store.transaction() as tx:
                row = tx.claim_effect(effect_id)
                if row is None:  # another reconciler (or a worker) has it now
                    continue
                self._reconcile(tx, row, report)
        report.seconds = time.monotonic() - started
        log.info(
            "reconciled %d effect(s): %d consistent, %d fixed, %d for a person",
            report.checked,
            report.consistent,
            len(report.fixed),
            len(report.needs_human),
        )
        return report

    def _reconcile(self, tx: Tx, row: Any, report: DriftReport) -> None:
        effect = Effect.from_row(row)
        status = EffectStatus(effect.status)
        if status not in (EffectStatus.INTENT, EffectStatus.APPLIED):
            return  # settled since it was listed
        adapter = adapter_for(effect.name)
        if adapter is None:
            report.no_adapter.append(effect.name)
            return
        report.checked += 1
        check = checked(adapter, effect)
        entry = _entry(effect, check)
        if check.verdict is Verdict.UNKNOWN:
            report.needs_human.append({**entry, "reason": "unknown"})
            return
        if status is EffectStatus.INTENT:
            if check.verdict is Verdict.APPLIED:
                record = check.record if check.record is not None else effect.result
                self._set(tx, effect, status, applied(record, checked=True))
                report.fixed.append({**entry, "action": "backfilled"})
            else:
                self._set(tx, effect, status, {"status": EffectStatus.ABSENT.value})
                report.fixed.append({**entry, "action": "marked_absent"})
            return
        if check.verdict is Verdict.APPLIED:
            self._set(tx, effect, status, {"checked_at": utcnow()})
            report.consistent += 1
            return
        self._absent_but_applied(tx, effect, adapter, entry, report)

    def _absent_but_applied(
        self, tx: Tx, effect: Effect, adapter: Any, entry: dict[str, Any], report: DriftReport
    ) -> None:
        """The ledger says applied, the world has no trace of it: the effect's policy."""
        policy = Policy(effect.policy)
        try:
            if policy is Policy.REAPPLY and hasattr(adapter, "apply"):
                result = adapter.apply(effect)
                self._set(tx, effect, EffectStatus.APPLIED, applied(result, checked=True))
                report.fixed.append({**entry, "action": "reapplied"})
                return
            if policy is Policy.COMPENSATE:
                compensate = (
                    import_ref(effect.compensate)
                    if effect.compensate
                    else getattr(adapter, "compensate", None)
                )
                if compensate is not None:
                    compensate(effect)
                    self._set(
                        tx,
                        effect,
                        EffectStatus.APPLIED,
                        {"status": EffectStatus.COMPENSATED.value, "checked_at": utcnow()},
                    )
                    report.fixed.append({**entry, "action": "compensated"})
                    return
        except Exception as exc:  # the repair failed: a person takes it from here
            entry = {**entry, "detail": f"{policy.value} failed: {type(exc).__name__}: {exc}"}
        self._set(
            tx,
            effect,
            EffectStatus.APPLIED,
            {"status": EffectStatus.FLAGGED.value, "checked_at": utcnow()},
        )
        report.needs_human.append({**entry, "reason": "missing_externally"})

    @staticmethod
    def _set(tx: Tx, effect: Effect, status: EffectStatus, changes: dict[str, Any]) -> None:
        tx.update_effect(effect.id, changes, status=status.value)


def _entry(effect: Effect, check: Check) -> dict[str, Any]:
    entry = {
        "effect": effect.name,
        "key": effect.key,
        "namespace": effect.namespace,
        "run_id": effect.run_id,
        "node": effect.node,
        "ledger": effect.status,
        "external": check.verdict.value,
    }
    if check.detail:
        entry["detail"] = check.detail
    return entry
