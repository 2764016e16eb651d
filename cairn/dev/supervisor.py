"""The supervisor of ``cairn dev``: once the database is ready
(:func:`cairn.dev.plan.prepare`), start the children, print their one log, restart the
worker on a change, and stop everything on Ctrl-C or SIGTERM.

Each child runs in a process group of its own, so that a stop reaches what the child
started too (a subprocess a handler spawned) and so that a terminal's Ctrl-C reaches the
supervisor alone, which then stops the children in order: SIGTERM to each group, SIGKILL
to what is left of it after a grace period. A child whose supervisor dies ends itself
(:mod:`cairn.dev.child`).

The supervisor binds the API's socket once and hands it to each process that serves, so
a reload that restarts the serving process (the embedded default's one process) leaves
the port listening: a request sent meanwhile waits in the socket's backlog for the new
process instead of being refused.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cairn.dev import DEV_BUILD, advert
from cairn.dev.advert import KEY_FILE
from cairn.dev.lines import Log
from cairn.dev.plan import DevPlan
from cairn.dev.reload import WATCHED_SUFFIXES, watch_sources

STOP_GRACE_S: Final = 5.0
READY_POLL_S: Final = 0.2
READY_WITHIN_S: Final = 60.0
TICK_S: Final = 0.2


@dataclass(frozen=True)
class Exited:
    child: Child
    generation: int
    code: int


@dataclass(frozen=True)
class Changed:
    paths: list[Path]


Event = Exited | Changed


@dataclass
class Child:
    """One child process, started again under the same role after a reload."""

    role: str
    argv: list[str]
    plan: DevPlan
    log: Log
    events: queue.Queue[Event]
    listener: socket.socket | None = None  # the API's, for a child that serves it
    process: subprocess.Popen[str] | None = None
    generation: int = 0

    def start(self) -> None:
        self.generation += 1
        self.process = subprocess.Popen(
            self.argv,
            env=self.plan.env,
            cwd=self.plan.project,
            pass_fds=() if self.listener is None else (self.listener.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
            errors="replace",
        )
        threading.Thread(
            target=self._pump,
            args=(self.process, self.generation),
            name=f"cairn-dev-{self.role}",
            daemon=True,
        ).start()

    def _pump(self, process: subprocess.Popen[str], generation: int) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.log.child(self.role, line)
        self.events.put(Exited(self, generation, process.wait()))

    def expected(self, event: Exited) -> bool:
        """True for the exit of a process this supervisor stopped, or replaced."""
        return event.generation != self.generation or self.process is None

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.log.say(f"{self.role} did not stop within {STOP_GRACE_S:g}s: killed")
        _signal_group(process.pid, signal.SIGKILL)  # whatever of its group is left
        process.wait()


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group has ended already
        os.killpg(group, signum)


@dataclass
class Supervisor:
    plan: DevPlan
    log: Log
    events: queue.Queue[Event] = field(default_factory=queue.Queue)
    children: dict[str, Child] = field(default_factory=dict)
    stopping: bool = False  # set by a signal handler: a plain flag, no lock to re-enter
    _stop_watching: threading.Event = field(default_factory=threading.Event)

    def run(self) -> int:
        """Run until Ctrl-C or SIGTERM (0), or until the API or scheduler fails (1)."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)
        try:
            listener = listen(self.plan)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            self.log.say(f"cannot listen on {self.plan.url}: {reason}", level="ERROR")
            return 1
        self._announce()
        home = self.plan.settings.home
        with listener:
            advert.publish(home, self.plan.url, self.plan.api_key, self.plan.env)
            try:
                return self._supervise(listener)
            finally:
                advert.withdraw(home)

    def _supervise(self, listener: socket.socket) -> int:
        for role in self.plan.roles:
            serves = role == "api" or (role == "worker" and self.plan.embedded)
            given = listener if serves else None
            child = Child(role, _argv(role, given), self.plan, self.log, self.events, given)
            self.children[role] = child
            child.start()
        threading.Thread(target=self._say_when_ready, name="cairn-dev-ready", daemon=True).start()
        watch_sources(
            self.plan.watch,
            [self.plan.settings.home],
            lambda paths: self.events.put(Changed(paths)),
            self._stop_watching,
        )
        try:
            return self._loop()
        finally:
            self._stop_watching.set()
            for child in reversed(self.children.values()):  # the API first: no new work
                child.stop()
            self.log.say("stopped")

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stopping = True

    def _loop(self) -> int:
        while not self.stopping:
            try:
                event = self.events.get(timeout=TICK_S)
            except queue.Empty:
                continue
            if isinstance(event, Changed):
                self._reload(event.paths)
            elif not event.child.expected(event):
                if event.child.role != "worker":
                    self.log.say(
                        f"{event.child.role} exited ({event.code}): stopping", level="ERROR"
                    )
                    return 1
                event.child.stop()  # what the exited worker left in its group, if anything
                self.log.say(
                    f"worker exited ({event.code}); it starts again when a file changes",
                    level="ERROR",
                )
        return 0

    def _reload(self, paths: list[Path]) -> None:
        names = ", ".join(_shown(path, self.plan.project) for path in paths)
        self.log.say(f"{names} changed: restarting the worker")
        worker = self.children["worker"]
        worker.stop()
        worker.start()
        self.log.say(f"worker restarted (pid {worker.process.pid if worker.process else '?'})")

    def _announce(self) -> None:
        plan = self.plan
        database = plan.settings.describe()["effective_database_url"]
        processes = ", ".join(plan.roles)
        if plan.embedded:  # see DevPlan.roles
            processes = "worker, scheduler and api in one process"
        broker = plan.settings.describe()["broker_url"] or "an in-process queue"
        self.log.say(f"cairn dev: {processes}; database {database}, broker {broker}")
        scope = "this machine only" if plan.loopback else "EVERY NETWORK THIS HOST IS ON"
        self.log.say(
            f"console: {plan.url}/console, listening on {plan.host} ({scope}); sign in "
            f"with the development key {plan.api_key} (admin of namespace "
            f"{plan.settings.workflows_namespace!r}, kept in {plan.settings.home / KEY_FILE})"
        )
        if not plan.loopback:
            self.log.say(
                "anyone who can reach this address and has the key administers this "
                "fleet: bind 127.0.0.1 unless you mean it",
                level="WARNING",
            )
        self.log.say(
            f"other terminals: cairn commands in {plan.project} use this API; elsewhere, "
            f"export CAIRN_API_URL={plan.url} CAIRN_API_KEY={plan.api_key}"
        )
        watched = ", ".join(str(path) for path in plan.watch)
        self.log.say(
            f"reload: the worker restarts when a {'/'.join(WATCHED_SUFFIXES)} file under "
            f"{watched} changes; its executions are build {DEV_BUILD!r} "
            f"(workers named {DEV_BUILD}@host:pid)"
        )

    def _say_when_ready(self) -> None:
        deadline = time.monotonic() + READY_WITHIN_S
        while time.monotonic() < deadline and not self.stopping:
            try:
                with urllib.request.urlopen(f"{self.plan.url}/healthz", timeout=1):
                    self.log.say(f"ready: {self.plan.url}/console (Ctrl-C stops everything)")
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(READY_POLL_S)


def listen(plan: DevPlan) -> socket.socket:
    """The API's listening socket, inherited by each process that serves it."""
    family = socket.AF_INET6 if ":" in plan.host else socket.AF_INET
    listener = socket.create_server((plan.host, plan.port), family=family, backlog=2048)
    listener.set_inheritable(True)
    return listener


def _argv(role: str, listener: socket.socket | None) -> list[str]:
    argv = [sys.executable, "-m", "cairn.dev.child", role]
    return argv if listener is None else [*argv, str(listener.fileno())]


def _shown(path: Path, project: Path) -> str:
    return str(path.relative_to(project)) if path.is_relative_to(project) else str(path)
