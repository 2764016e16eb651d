"""The preloaded command line, as a shell meets it: ``python -m cairn.cli`` processes on
the embedded default, in a runtime folder of the test's own.

A command with none listening runs in its own process and starts one; the commands after
it are handed over and answer exactly as their own process would — output, errors, exit
code, usage lines — each in its own folder and environment; an interrupt reaches the
command, and a command whose caller is killed does not outlive it; a preloaded process
killed is replaced, and one left idle ends by itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cairn.client import Client
from cairn.config import Settings

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = """\
name: preload_cli
version: 1
start: review
nodes:
  review: {wait: {signals: {approve: done}, timeout: 1h, on_timeout: done}}
  done:   {end: succeeded}
"""
DEADLINE_S = 60.0


@dataclass
class Shell:
    """A user's shell: its environment, and the runtime folder of its preloaded process."""

    env: dict[str, str]
    runtime: Path

    def run(
        self, *args: str, own: bool = False, cwd: Path = ROOT
    ) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "CAIRN_CLI_PRELOAD": "0"} if own else self.env
        return subprocess.run(
            [sys.executable, "-m", "cairn.cli", *args], cwd=cwd, env=env,
            capture_output=True, text=True, timeout=DEADLINE_S, check=False,
        )  # fmt: skip

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "cairn.cli", *args], cwd=ROOT, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip

    def server(self) -> int:
        """The pid of the preloaded process, once it listens."""
        deadline = time.monotonic() + DEADLINE_S
        while not (found := list(self.runtime.glob("cairn/cli-*.pid"))):
            assert time.monotonic() < deadline, "no preloaded command line started"
            time.sleep(0.05)
        return int(found[0].read_text().strip())

    def served(self) -> list[str]:
        """The log's line for each command the preloaded process ran."""
        lines: list[str] = []
        for log in self.runtime.glob("cairn/cli-*.log"):
            lines += [line for line in log.read_text().splitlines() if line.startswith("pid ")]
        return lines


def submitted(home: Path, count: int = 1) -> list[str]:
    definition = home / "preload_cli.yaml"
    home.mkdir(parents=True, exist_ok=True)
    definition.write_text(WORKFLOW)
    client = Client(Settings.from_env({"CAIRN_HOME": str(home)}))
    try:
        client.register(definition)
        return [client.submit("preload_cli") for _ in range(count)]
    finally:
        client.close()


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    # Short, as a real runtime folder is: a socket's address has room for 107 bytes.
    runtime = Path(tempfile.mkdtemp(prefix="cairn-preload-"))
    env = {key: value for key, value in os.environ.items() if not key.startswith("CAIRN_")}
    env.update(
        XDG_RUNTIME_DIR=str(runtime), CAIRN_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT),
        NO_COLOR="1", COLUMNS="120",
    )  # fmt: skip
    yield Shell(env, runtime)
    for pid_file in runtime.glob("cairn/cli-*.pid"):
        _stop(int(pid_file.read_text().strip()))
    shutil.rmtree(runtime, ignore_errors=True)


def _stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def answer(done: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    """A command's exit code and output, its durations ("waiting ... for 2.3 s") blurred."""
    return (
        done.returncode,
        *(re.sub(r"\d+(\.\d+)? (s|ms|min)\b", "N", text) for text in (done.stdout, done.stderr)),
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def eventually(condition: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_handed_over_command_answers_as_its_own_process_would(
    shell: Shell, tmp_path: Path
) -> None:
    (run,) = submitted(tmp_path / "home")
    first = shell.run("status", run)  # none listens: it runs here and starts one
    assert first.returncode == 0, first.stderr
    shell.server()
    cases = [
        ("status", run), ("status", run, "--json"), ("events", run), ("runs",),
        ("status", "no-such-run"), ("status", "--help"), ("--version",), ("nonsense",),
    ]  # fmt: skip
    for args in cases:
        own, handed = shell.run(*args, own=True), shell.run(*args)
        assert answer(handed) == answer(own), args
    served = shell.served()
    assert len(served) == len(cases), served
    assert any("cairn status: exit 2" in line for line in served), served
    assert json.loads(shell.run("status", run, "--json").stdout)["status"] == "waiting"


def test_each_command_brings_its_own_environment_folder_and_path(
    shell: Shell, tmp_path: Path
) -> None:
    (one,) = submitted(tmp_path / "one")
    (other,) = submitted(tmp_path / "other")
    shell.run("--version")
    shell.server()
    for home, run in ((tmp_path / "one", one), (tmp_path / "other", other)):
        shell.env["CAIRN_HOME"] = str(home)
        listed = shell.run("runs", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [r["id"] for r in json.loads(listed.stdout)["runs"]] == [run]
    # A definition named relative to the command's folder, its handlers found on the
    # command's PYTHONPATH (not the preloaded process's).
    project = tmp_path / "project"
    (project / "lib").mkdir(parents=True)
    (project / "lib" / "steps_here.py").write_text("def noop(ctx, state):\n    return {}\n")
    (project / "flow.yaml").write_text(
        "name: here\nversion: 1\nstart: a\nnodes:\n"
        "  a: {handler: 'steps_here:noop', next: b}\n  b: {end: succeeded}\n"
    )
    shell.env["PYTHONPATH"] = str(project / "lib")
    valid = shell.run("validate", "flow.yaml", cwd=project)
    assert valid.returncode == 0, valid.stderr
    shell.env["PYTHONPATH"] = str(ROOT)
    missing = shell.run("validate", "flow.yaml", cwd=project)
    assert missing.returncode == 2 and "steps_here" in missing.stderr, missing.stderr
    assert len(shell.served()) == 4  # all but the first, which started it


def test_signals_reach_the_command_its_death_its_caller_and_a_killed_caller_leaves_none(
    shell: Shell, tmp_path: Path
) -> None:
    (run,) = submitted(tmp_path / "home")
    shell.run("--version")
    server = shell.server()
    waiting = shell.start("wait", run)  # the run waits for a signal nobody sends
    eventually(lambda: children_of(server), "the command never started")
    waiting.send_signal(signal.SIGINT)
    assert waiting.wait(timeout=DEADLINE_S) == 130
    eventually(lambda: not children_of(server), "the interrupted command is still running")

    # A command killed dies in its caller too, as a shell (or a test) sees it.
    waiting = shell.start("wait", run)
    eventually(lambda: children_of(server), "the command never started")
    (child,) = children_of(server)
    os.kill(child, signal.SIGKILL)
    assert waiting.wait(timeout=DEADLINE_S) == -signal.SIGKILL

    waiting = shell.start("wait", run)
    eventually(lambda: children_of(server), "the command never started")
    waiting.kill()
    waiting.wait()
    eventually(lambda: not children_of(server), "the command outlived its caller")
    assert shell.run("status", run).returncode == 0  # and the process serves on


def test_a_killed_preloaded_process_is_replaced_and_an_idle_one_ends(
    shell: Shell, tmp_path: Path
) -> None:
    (run,) = submitted(tmp_path / "home")
    shell.env["CAIRN_CLI_PRELOAD_IDLE_S"] = "2"
    shell.run("--version")
    killed = shell.server()
    os.kill(killed, signal.SIGKILL)
    eventually(lambda: not alive(killed), "kill -9 did not end it")
    # Its socket is left behind: the next command finds nobody there, runs in its own
    # process, and starts another.
    after = shell.run("status", run)
    assert after.returncode == 0 and run in after.stdout, after.stderr
    eventually(lambda: shell.server() != killed, "no other preloaded process started")
    replacement = shell.server()
    assert shell.run("status", run).returncode == 0
    # Idle for its two seconds, it ends, and takes its socket and pid file with it.
    eventually(lambda: not alive(replacement), "the idle one never ended")
    assert list(shell.runtime.glob("cairn/cli-*")) == []
