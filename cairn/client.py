"""The Python API: submit runs, look at them, wait for them.

    import cairn
    run_id = cairn.submit("book_flight", {"origin": "BER", "destination": "LIS"})
    cairn.get_run(run_id).status

The module-level functions use a default :class:`Client` built from ``CAIRN_*`` on first
use; build your own ``Client(settings)`` to talk to several deployments or in tests.

This client writes to the database directly: its writes are made as the principal
``db:<user>`` (the operating system's user), recorded in each run's events and in the
audit log as such. A service that should not hold database credentials uses the HTTP
API and an API key instead (docs/access.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from cairn.access.local import LocalWrites, db_principal
from cairn.config import Settings
from cairn.definitions.catalog import load_all
from cairn.engine.batches import SubmitItem, Submitted
from cairn.engine.reads import RunView
from cairn.engine.schedules import Schedules
from cairn.errors import CairnError
from cairn.model.awaiting import Awaiting
from cairn.model.definition import WorkflowDefinition
from cairn.model.selection import RunFilter
from cairn.model.starts import Debounce, Singleton
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.store.records import ListedRun
from cairn.timetravel.timeline import Timeline


class WaitTimeout(CairnError):
    code = "wait_timeout"


class Client:
    """Submit runs, read them, signal and cancel them, straight against the deployment's
    database and broker (``settings``; default: ``CAIRN_*`` from the environment).
    Connections open on first use; :meth:`close` them when done."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()
        self.principal = db_principal()
        self.actor = self.principal.actor

    @contextmanager
    def audited(self, action: str, namespace: str, target: str | None = None) -> Iterator[None]:
        """Write the audit entry of a write this client makes (``failed`` if it raises)."""
        with LocalWrites(self.runtime.store).audited(action, namespace, target):
            yield

    @property
    def runtime(self) -> Runtime:
        """The deployment's store, orchestrator and broker, built on first use."""
        with self._lock:
            if self._runtime is None:
                # It serves a person or an app: its first call after a database restart
                # must not fail on a pooled connection that died with it.
                self._runtime = Runtime.build(self.settings, pre_ping=True, resolve=False)
            return self._runtime

    def register(
        self, source: WorkflowDefinition | str | Path, *, namespace: str = "default"
    ) -> list[WorkflowDefinition]:
        """Register a definition, or every definition in a file, module or directory, and
        add (or bring up to date) the schedules each declares, in ``namespace``."""
        definitions = (
            [source] if isinstance(source, WorkflowDefinition) else load_all([str(source)])
        )
        orchestrator = self.runtime.orchestrator
        names = ", ".join(definition.key for definition in definitions)
        with self.audited("definitions.register", namespace, names[:300]):
            definitions = orchestrator.registry.register_all(definitions, namespace)
            for definition in definitions:
                orchestrator.schedules.declare(namespace, definition)
        return definitions

    @property
    def schedules(self) -> Schedules:
        """Cron schedules: ``add``, ``change``, ``get``, ``of_namespace``, ``pause``,
        ``resume``, ``delete``, ``backfill`` (see docs/flow-control.md)."""
        return self.runtime.orchestrator.schedules

    def submit(
        self,
        workflow: str,
        run_input: Mapping[str, Any] | None = None,
        *,
        request_id: str | None = None,
        namespace: str = "default",
        version: int | None = None,
        webhook: str | None = None,
        debounce: Debounce | Mapping[str, Any] | None = None,
        singleton: Singleton | Mapping[str, Any] | None = None,
        priority: int | None = None,
    ) -> str:
        """Start a run; the same request id returns the same run. ``debounce`` (``{"key",
        "wait", "max_wait"?}``) collapses rapid submissions with its key into one run;
        ``singleton`` (``{"key", "mode": "skip"|"cancel"}``) keeps one unfinished run per
        key; ``priority`` (-5..5, default 0, higher first) orders it for slots and workers
        (:class:`~cairn.model.priority.InvalidPriority` otherwise) — see
        docs/flow-control.md."""
        return self.runtime.orchestrator.submit(
            workflow,
            run_input,
            request_id=request_id,
            namespace=namespace,
            version=version,
            webhook=webhook,
            debounce=None if debounce is None else Debounce.of(debounce),
            singleton=None if singleton is None else Singleton.of(singleton),
            priority=priority,
            actor=self.actor,
        )

    def submit_batch(
        self, runs: Sequence[SubmitItem | Mapping[str, Any]], *, namespace: str = "default"
    ) -> list[Submitted]:
        """Start up to 1,000 runs in one transaction (``{"workflow", "input",
        "request_id"?, "version"?, "webhook"?, "priority"?}`` each); every item is answered
        on its own."""
        items = [r if isinstance(r, SubmitItem) else SubmitItem.from_dict(r) for r in runs]
        return self.runtime.orchestrator.submit_batch(items, namespace=namespace, actor=self.actor)

    def get_run(self, run_id: str) -> RunView:
        """The run as it is now: status, reason, state and nodes (``RunNotFound`` if no
        run has that id)."""
        return self.runtime.orchestrator.get_run(run_id)

    def signal(
        self,
        run_id: str,
        name: str,
        payload: Mapping[str, Any] | None = None,
        *,
        signal_id: str | None = None,
        node: str | None = None,
        comment: str | None = None,
    ) -> bool:
        """Send a signal to a waiting run (a wait node's signal, or ``recovery.retry``,
        ``recovery.complete`` with ``{"output": {...}}``, ``recovery.fail`` for a node
        held for an operator), as this client's principal, ``comment`` beside it. True if
        applied; False if ``signal_id`` was applied before. A signal the run cannot take
        raises a :class:`CairnError`."""
        with LocalWrites(self.runtime.store).on_run("run.signal", run_id):
            decision = self.runtime.orchestrator.signal(
                run_id,
                name,
                payload,
                actor=self.actor,
                signal_id=signal_id,
                node=node,
                comment=comment,
                role=self.principal.role.value,
            )
        return decision.ignored is None

    def cancel(self, run_id: str, reason: str) -> bool:
        """Cancel a run (see :meth:`Orchestrator.cancel`): False if it was already being
        cancelled. A finished run raises :class:`~cairn.errors.IllegalTransition`."""
        with LocalWrites(self.runtime.store).on_run("run.cancel", run_id):
            decision = self.runtime.orchestrator.cancel(run_id, reason, actor=self.actor)
        return decision.ignored is None

    def rollback(
        self,
        run_id: str,
        reason: str,
        *,
        confirm: bool = False,
        to_seq: int | None = None,
        step: str | None = None,
        step_iteration: int | None = None,
    ) -> None:
        """Undo a started run, compensating every applied step — or only those after event
        ``to_seq``, or only ``step``'s, then resume. Needs ``confirm=True``."""
        with LocalWrites(self.runtime.store).on_run("run.rollback", run_id):
            self.runtime.orchestrator.rollback(
                run_id,
                reason,
                actor=self.actor,
                confirm=confirm,
                to_seq=to_seq,
                step=step,
                step_iteration=step_iteration,
            )

    def waiting(self, namespace: str | None = None, limit: int = 100) -> list[Awaiting]:
        """Runs waiting for a person — a wait node's signal, an operator's decision about a
        held node — longest waiting first."""
        return self.runtime.orchestrator.waiting(namespace, limit)

    def runs(
        self,
        *,
        namespace: str = "default",
        status: str | Sequence[str] | None = None,
        workflow: str | None = None,
        version: int | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        page_size: int = 50,
    ) -> Iterator[ListedRun]:
        """The namespace's runs the filters select, newest first, read a page at a time
        as you iterate (keyset-paged: runs created meanwhile shift nothing) — the filters
        of ``cairn.http.Client.runs``; ``status`` one or several, ``created_after`` and
        ``created_before`` epoch seconds (exclusive). ``run.to_summary()`` is the API's
        form of each."""
        statuses = [status] if isinstance(status, str) else list(status or ())
        selection = RunFilter(
            statuses=tuple(RunStatus(value) for value in statuses),
            workflow=workflow,
            version=version,
            created_after=created_after,
            created_before=created_before,
        )
        before: tuple[datetime, str] | None = None
        while True:
            with self.runtime.store.reading() as tx:
                page = tx.runs_page(namespace, selection, limit=page_size, before=before)
            yield from page
            if len(page) < page_size:
                return
            before = (page[-1].created_at, page[-1].id)

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """The run's events after seq ``after``, oldest first, as JSON objects."""
        return self.runtime.orchestrator.events(run_id, after)

    def timeline(self, run_id: str) -> Timeline:
        """The run's history, its state at any seq, diffs and bisection: read-only, rebuilt
        from the log (see docs/time-travel.md)."""
        return Timeline(self.runtime.orchestrator, run_id)

    def wait(self, run_id: str, timeout_s: float = 60.0, poll_s: float = 0.2) -> RunView:
        """Poll until the run is terminal; raise :class:`WaitTimeout` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            view = self.get_run(run_id)
            if view.status.terminal:
                return view
            if time.monotonic() >= deadline:
                raise WaitTimeout(
                    f"run {run_id} is still {view.status.value} after {timeout_s:g} s"
                )
            time.sleep(poll_s)

    def close(self) -> None:
        """Close the connections this client opened; it opens new ones if used again."""
        with self._lock:
            if self._runtime is not None:
                self._runtime.close()
                self._runtime = None


_default: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    global _default  # noqa: PLW0603 - the lazily built client behind the module functions
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def submit(
    workflow: str,
    run_input: Mapping[str, Any] | None = None,
    *,
    request_id: str | None = None,
    namespace: str = "default",
    **options: Any,
) -> str:
    """Start a run of ``workflow``; the same request id returns the same run. ``options``
    are :meth:`Client.submit`'s: ``version``, ``webhook``, ``debounce``, ``singleton``,
    ``priority``."""
    return default_client().submit(
        workflow, run_input, request_id=request_id, namespace=namespace, **options
    )


def get_run(run_id: str) -> RunView:
    """The run as it is now, read through the default :class:`Client`."""
    return default_client().get_run(run_id)
