"""One reconciliation pass (``cairn reconcile``, a Kubernetes CronJob).

The external system is the source of truth; the ledger is cairn's view of it. Each pass
looks at intents and unknown outcomes older than the grace period (their caller may have
died between the call and recording its outcome; their call's response was lost) and at
applied effects never checked, asks each effect type's adapter, and repairs by rule:

==================  ==================  =================================================
ledger              external system     what the pass does
==================  ==================  =================================================
intent or unknown   applied             record it applied, with the external record
                                        (backfill: a timing gap, fixed) — but if its run
                                        ended other than succeeded, record it and flag it
                                        for a person: money moved for a run that did not
                                        succeed
intent or unknown   absent              mark it ``absent``: it never took effect, and a
                                        retry of its node may call again (fixed)
intent or unknown   (no adapter)        while its run goes on, leave it (the node's retry
                                        calls again with the same key); once the run
                                        ended, flag it for a person
applied             applied             note it checked
applied             absent              by the effect's policy: ``reapply`` through the
                                        adapter, ``compensate``, or ``flag`` it for a
                                        person (a business discrepancy)
any                 unknown             leave it, report it for a person
==================  ==================  =================================================

Each effect is claimed with ``FOR UPDATE SKIP LOCKED`` for the length of its check and
repair, and every repair is a conditional update: two reconcilers at once (or one beside
a worker resolving the same intent) never repair an effect twice. A pass is idempotent:
what it fixed or flagged is no longer a candidate.
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
from cairn.effects.ledger import UNSETTLED, applied
from cairn.model.definition import import_ref
from cairn.model.effects import EffectStatus, Policy
from cairn.model.statuses import RunStatus
from cairn.store.records import EffectRecord, RunHead, utcnow
from cairn.store.sql import Store, Tx

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
    # Effects the pass found whose outcome the ledger did not know (status ``unknown``:
    # the call was made, its response lost), each with what the pass did about it.
    unknown: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def note_unknown(self, entry: dict[str, Any], outcome: str) -> None:
        if entry["ledger"] == EffectStatus.UNKNOWN.value:
            self.unknown.append({**entry, "outcome": outcome})

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "checked": self.checked,
            "consistent": self.consistent,
            "fixed": self.fixed,
            "needs_human": self.needs_human,
            "no_adapter": sorted(set(self.no_adapter)),
            "unknown": self.unknown,
            "counts": {
                "fixed": dict(Counter(entry["action"] for entry in self.fixed)),
                "needs_human": dict(Counter(entry["reason"] for entry in self.needs_human)),
                "unknown": len(self.unknown),
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
            "cairn_reconcile_unknown",
            "Effects of unknown outcome (the call was made, whether it took effect was not "
            "known) the last pass found",
            registry=registry,
        ).set(len(self.unknown))
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
    namespace: str | None = None  # one namespace's effects only (None: every one)

    def run_once(self, limit: int = BATCH) -> DriftReport:
        started = time.monotonic()
        report = DriftReport()
        with self.store.transaction() as tx:
            candidates = tx.effects_to_check(tx.now() - self.grace_s, limit, self.namespace)
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

    def _reconcile(self, tx: Tx, row: EffectRecord, report: DriftReport) -> None:
        effect = Effect.from_row(row)
        status = effect.status
        if status not in (*UNSETTLED, EffectStatus.APPLIED):
            return  # settled since it was listed
        run = tx.run_head(effect.run_id) if status in UNSETTLED else None
        ended = _ended(run)
        adapter = adapter_for(effect.name)
        if adapter is None:
            report.no_adapter.append(effect.name)
            if status in UNSETTLED and ended is not None:
                # Nobody can ask, and its run will not run the node again: a person.
                self._set(tx, effect, status, {"status": EffectStatus.FLAGGED.value})
                entry = {**_entry(effect, None), "run_status": ended}
                report.needs_human.append({**entry, "reason": "no_adapter"})
                report.note_unknown(entry, "flagged: no_adapter")
            elif status is EffectStatus.UNKNOWN:
                report.note_unknown(_entry(effect, None), "left: no adapter, its run goes on")
            return
        report.checked += 1
        check = checked(adapter, effect)
        entry = _entry(effect, check)
        if ended is not None:
            entry["run_status"] = ended
        if check.verdict is Verdict.UNKNOWN:
            report.needs_human.append({**entry, "reason": "unknown"})
            report.note_unknown(entry, "left: the adapter cannot tell")
            return
        if status in UNSETTLED:
            self._settle(tx, effect, check, entry, report)
            return
        if check.verdict is Verdict.APPLIED:
            self._set(tx, effect, status, {"checked_at": utcnow()})
            report.consistent += 1
            return
        self._absent_but_applied(tx, effect, adapter, entry, report)

    def _settle(
        self, tx: Tx, effect: Effect, check: Check, entry: dict[str, Any], report: DriftReport
    ) -> None:
        """An intent or an unknown outcome, once the adapter said applied or absent."""
        status, ended = effect.status, entry.get("run_status")
        if check.verdict is Verdict.ABSENT:
            self._set(tx, effect, status, {"status": EffectStatus.ABSENT.value})
            report.fixed.append({**entry, "action": "marked_absent"})
            report.note_unknown(entry, "marked_absent")
            return
        record = check.record if check.record is not None else effect.result
        changes = applied(record, checked=True)
        if ended is not None and ended != RunStatus.SUCCEEDED.value:
            # It took effect, and its run ended without knowing: money moved for a run
            # that did not succeed. Recorded (result, digest, applied_at), and a person's.
            self._set(tx, effect, status, {**changes, "status": EffectStatus.FLAGGED.value})
            report.needs_human.append({**entry, "reason": "applied_for_unsuccessful_run"})
            report.note_unknown(entry, "flagged: applied_for_unsuccessful_run")
            return
        self._set(tx, effect, status, changes)
        report.fixed.append({**entry, "action": "backfilled"})
        report.note_unknown(entry, "backfilled")

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


def _entry(effect: Effect, check: Check | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "effect": effect.name,
        "key": effect.key,
        "namespace": effect.namespace,
        "run_id": effect.run_id,
        "node": effect.node,
        "ledger": effect.status,
        "external": check.verdict.value if check is not None else None,
    }
    if effect.error:
        entry["error"] = effect.error
    if check is not None and check.detail:
        entry["detail"] = check.detail
    return entry


def _ended(run: RunHead | None) -> str | None:
    """The status a run ended with; None while it goes on (and for a run that is not in
    the store: deleted by retention, or never there — nothing to tell)."""
    if run is None:
        return None
    return run.status.value if run.status.terminal else None
