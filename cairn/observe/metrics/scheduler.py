"""A scheduler process's own counters and histograms (timers, retries, recoveries,
relayed messages, webhook deliveries, stalls, schedule ticks, debounced starts): ``sum``
them over the scheduler replicas. Served by ``cairn scheduler --metrics-port``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from cairn.model.state import TimerKind

LATENESS_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
TIMER_KINDS = frozenset(kind.value for kind in TimerKind)
RETRY_TIMERS = frozenset({TimerKind.RETRY.value, TimerKind.COMPENSATION_RETRY.value})


class SchedulerMetrics:
    """This scheduler process's counters; each instance has its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.timers_fired = Counter(
            "cairn_timers_fired",
            "Durable timers fired by this scheduler, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.timer_lateness = Histogram(
            "cairn_timer_lateness_seconds",
            "How long after its due time a timer fired.",
            buckets=LATENESS_BUCKETS_S,
            registry=self.registry,
        )
        self.retries = Counter(
            "cairn_retries",
            "Node (and compensation) retries started by this scheduler's retry timers.",
            registry=self.registry,
        )
        self.stalled = Counter(
            "cairn_nodes_stalled",
            "Running executions whose heartbeats arrive but whose progress has not moved for "
            "their node's stall_after, flagged by this scheduler (each once).",
            ["workflow"],
            registry=self.registry,
        )
        self.recoveries = Counter(
            "cairn_recoveries",
            "Executions with no live lease found by this scheduler: dispatched again, held "
            "for an operator, or failed after too many recoveries.",
            ["outcome"],
            registry=self.registry,
        )
        self.relayed = Counter(
            "cairn_outbox_relayed",
            "Node messages a crash left unpublished, published by this scheduler's relay.",
            registry=self.registry,
        )
        self.webhooks = Counter(
            "cairn_webhook_deliveries",
            "Webhook delivery attempts by this process, by outcome: delivered, retry "
            "(to be tried again), given_up.",
            ["outcome"],
            registry=self.registry,
        )

        self.ticks = Counter(
            "cairn_schedule_ticks",
            "Schedule ticks this scheduler looked at, by outcome: started (a run), skipped "
            "(missed beyond the catch-up window, or by the overlap policy).",
            ["outcome"],
            registry=self.registry,
        )
        self.debounced = Counter(
            "cairn_debounced_runs_started",
            "Debounced runs this scheduler started once their submissions paused.",
            registry=self.registry,
        )

    def schedule_ticks(self, started: int, skipped: int) -> None:
        if started:
            self.ticks.labels("started").inc(started)
        if skipped:
            self.ticks.labels("skipped").inc(skipped)

    def timer_fired(self, timer_id: str, lateness_s: float) -> None:
        kind = timer_id.partition(":")[0]
        kind = kind if kind in TIMER_KINDS else "other"
        self.timers_fired.labels(kind).inc()
        self.timer_lateness.observe(max(0.0, lateness_s))
        if kind in RETRY_TIMERS:
            self.retries.inc()
