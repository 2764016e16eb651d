"""``cairn dev`` as a developer runs it: a real process in an empty folder holding one
workflow (a YAML file and its handler module). A run submitted over the HTTP API
succeeds; the handler file is edited and the next run uses the new code; SIGINT (or
SIGTERM) stops every process the command started, checked through /proc. Once on the
embedded default (SQLite in ./.cairn), once on PostgreSQL, Redis and a Celery broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from cairn.dev.advert import ADVERT_FILE
from cairn.http import Client, RetryPolicy
from tests.integration.test_lease_metrics import free_ports
from tests.support.services import ROOT

FLOW = """\
name: greet
version: 1
start: hello
nodes:
  hello: {handler: "steps:hello", next: done}
  done: {end: succeeded}
"""

HANDLER = """\
import logging

log = logging.getLogger("steps")


def hello(ctx, state):
    log.info("saying hello")
    return {{"greeting": "{greeting}"}}
"""

READY_S = 60.0
RUN_S = 60.0
# Each test starts three or four interpreters and restarts the worker three times: on a
# busy 2-core machine that takes a minute or more, past the suite's default timeout.
pytestmark = pytest.mark.timeout(300)


@dataclass
class Dev:
    """A ``cairn dev`` process and the lines of its log."""

    process: subprocess.Popen[str]
    folder: Path
    url: str
    lines: list[str] = field(default_factory=list)

    def pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, wanted: Callable[[str], bool], what: str, after: int = 0) -> int:
        """The index of the first line from ``after`` on that is ``wanted``."""
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            for index in range(after, len(self.lines)):
                if wanted(self.lines[index]):
                    return index
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        log = "\n".join(self.lines)
        raise AssertionError(f"no line with {what} in the log of cairn dev:\n{log}")

    def key(self) -> str:
        return (self.folder / ".cairn" / "dev-api-key").read_text(encoding="utf-8").strip()


@contextmanager
def cairn_dev(folder: Path, env: dict[str, str]) -> Iterator[Dev]:
    (port,) = free_ports(1)
    base = {key: value for key, value in os.environ.items() if not key.startswith("CAIRN_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "dev", "--workflows", "flow.yaml", f"--port={port}"],
        cwd=folder,
        env={**base, **env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    dev = Dev(process, folder, f"http://127.0.0.1:{port}")
    pump = threading.Thread(target=dev.pump, daemon=True)
    pump.start()
    try:
        yield dev
    finally:
        if process.poll() is None:
            process.kill()  # its children then end themselves (see test_dev_orphaned)
        process.wait()
        pump.join(timeout=15)
        assert process.stdout is not None
        process.stdout.close()


def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "flow.yaml").write_text(FLOW, encoding="utf-8")
    (folder / "steps.py").write_text(HANDLER.format(greeting="hello v1"), encoding="utf-8")
    return folder


def greeting(client: Client) -> str:
    run_id = client.submit("greet", {}).run_id
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        run = client.get_run(run_id)
        if run.status not in {"pending", "running"}:
            assert run.status == "succeeded", run
            assert run.vars is not None
            # Executed by the development build's workers, and so marked.
            workers = {str(execution["worker"]) for execution in run.executions}
            assert workers and all(name.startswith("dev@") for name in workers), workers
            return str(run.vars["greeting"])
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not end within {RUN_S}s")


def descendants(root: int) -> dict[int, int]:
    """Every live process under ``root`` (children, theirs, ...), with its process group,
    read from /proc."""
    parents: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        fields = stat.rpartition(")")[2].split()  # after the command, which may hold spaces
        parents[int(entry.name)] = (int(fields[1]), int(fields[2]))
    found: dict[int, int] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, group) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = group
                frontier.append(pid)
    return found


def alive(pid: int) -> bool:
    """Running, and not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def group_members(groups: set[int]) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) in groups and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def signs_in_to_the_console(dev: Dev) -> None:
    """The printed development key signs a browser in to the console."""
    with httpx.Client(base_url=dev.url, follow_redirects=False) as browser:
        assert browser.get("/console/runs").status_code == 303  # to the sign-in page
        form = browser.get("/console/sign-in")
        assert form.status_code == 200
        csrf = form.cookies["cairn_signin"]
        answer = browser.post("/console/sign-in", data={"csrf": csrf, "key": dev.key()})
        assert answer.status_code == 303, answer.text
        assert browser.get("/console/runs").status_code == 200  # signed in: no redirect


def edit(dev: Dev, handler: str) -> int:
    """Write the handler module anew; the index of the log line that says the worker
    restarted for it."""
    after = len(dev.lines)
    (dev.folder / "steps.py").write_text(handler, encoding="utf-8")
    changed = dev.wait_for_line(lambda line: "steps.py changed" in line, "the reload", after)
    return dev.wait_for_line(lambda line: "worker restarted" in line, "the restart", changed)


def exercise(dev: Dev, *, worker_processes: int, stop: signal.Signals) -> None:
    """Ready; a run succeeds on v1; an edit restarts the worker; the next run is v2; a
    broken handler stops the worker until the next edit; ``stop`` (Ctrl-C's SIGINT, or
    SIGTERM) stops every process."""
    dev.wait_for_line(lambda line: "ready:" in line, "ready")
    printed = dev.wait_for_line(lambda line: "development key" in line, "the key")
    assert dev.key() in dev.lines[printed]
    signs_in_to_the_console(dev)
    # Tried once, with time to wait: a request sent while a reload restarts the serving
    # process waits for the new one (the port stays open), it is never refused.
    with Client(dev.url, dev.key(), retry=RetryPolicy(attempts=1), timeout_s=60) as client:
        assert greeting(client) == "hello v1"
        commands_below_find_it(dev)
        started = descendants(dev.process.pid)
        assert len(started) >= worker_processes, started
        (dev.folder / "steps.py").write_text(HANDLER.format(greeting="hello v2"), encoding="utf-8")
        edit(dev, HANDLER.format(greeting="hello v2"))
        assert greeting(client) == "hello v2"
        # A handler that does not import: one line says why, the API stays up, and the
        # next change starts the worker again.
        mark = edit(dev, "def hello(:\n")
        failed = dev.wait_for_line(lambda line: "cannot start" in line, "the refusal", mark)
        assert "steps:hello" in dev.lines[failed + 1], dev.lines[failed:]  # the message's
        if worker_processes == 1:  # embedded: its one process serves on, without workers
            dev.wait_for_line(lambda line: "the API serves on" in line, "the API", failed)
            assert next(client.runs(), None) is not None  # answered: the runs so far
        else:
            dev.wait_for_line(lambda line: "worker exited (1)" in line, "the exit", failed)
        edit(dev, HANDLER.format(greeting="hello v3"))
        assert greeting(client) == "hello v3"
    step_lines = [line for line in dev.lines if "saying hello" in line]
    assert step_lines and all(" worker " in f" {line} " for line in step_lines), step_lines
    assert all(" hello#1 " in line for line in step_lines), step_lines  # run and node tagged
    banner = [line for line in dev.lines if "[config]" in line or "-------------- " in line]
    assert not banner, dev.lines  # Celery's, which the quiet worker does not print
    running = descendants(dev.process.pid)
    dev.process.send_signal(stop)
    assert dev.process.wait(timeout=30) == 0, "\n".join(dev.lines)
    everything = {**started, **running}
    assert not wait_gone(everything, 5), dev.lines[-20:]
    assert not group_members(set(everything.values()) - {os.getpgrp()})
    assert not (dev.folder / ".cairn" / ADVERT_FILE).exists()  # withdrawn as it stopped


def commands_below_find_it(dev: Dev) -> None:
    """A command in the project, without CAIRN_API_URL or any other setting, goes through
    the running fleet's API: the run it submits is one the fleet has (the embedded
    default's database is the project's, and the command's own default would be
    elsewhere), and its status shows the fleet's live view."""
    below = dev.folder / "sub"
    below.mkdir(exist_ok=True)
    home = below / "home"  # where a command opening its own default would put it
    env = {key: value for key, value in os.environ.items() if not key.startswith("CAIRN_")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(home))

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "cairn.cli", *args],
            cwd=below, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    run_id = cli("submit", "greet").strip().splitlines()[-1]
    cli("wait", run_id, "--timeout", "60")
    assert "succeeded" in cli("status", run_id)
    assert not home.exists()  # no database of its own was opened


def test_dev_on_the_embedded_default(tmp_path: Path) -> None:
    folder = project(tmp_path)
    with cairn_dev(folder, {}) as dev:
        exercise(dev, worker_processes=1, stop=signal.SIGINT)
    assert (folder / ".cairn" / "cairn.db").exists()
    assert (folder / ".cairn" / "dev-api-key").stat().st_mode & 0o077 == 0


def test_dev_on_postgresql_redis_and_celery(
    tmp_path: Path, database_url: str, redis_urls: tuple[str, str]
) -> None:
    broker, leases = redis_urls
    env = {
        "CAIRN_DATABASE_URL": database_url,
        "CAIRN_BROKER_URL": broker,
        "CAIRN_REDIS_URL": leases,
    }
    with cairn_dev(project(tmp_path), env) as dev:
        exercise(dev, worker_processes=3, stop=signal.SIGTERM)


def wait_gone(pids: dict[int, int], within_s: float) -> list[int]:
    """Those of ``pids`` still alive after ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def test_dev_orphaned(tmp_path: Path) -> None:
    """A supervisor killed with SIGKILL runs no handler to stop its children: they notice
    and stop themselves."""
    with cairn_dev(project(tmp_path), {}) as dev:
        dev.wait_for_line(lambda line: "ready:" in line, "ready")
        started = descendants(dev.process.pid)
        assert started
        dev.process.kill()
        dev.process.wait()
        assert not wait_gone(started, 15)
        assert not group_members(set(started.values()) - {os.getpgrp()})
