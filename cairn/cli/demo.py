"""``cairn demo``: run an agent skill on the embedded default, kill the worker mid-step
with SIGKILL, start a new one, and show what was resumed and what was skipped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.cli._app import app, out

if TYPE_CHECKING:
    from rich.table import Table

    from cairn.client import Client
    from cairn.engine.reads import RunView

DEMO_ENV = {
    "CAIRN_LEASE_TTL": "2",
    "CAIRN_HEARTBEAT_INTERVAL": "0.5",
    "CAIRN_RECOVERY_AFTER": "2",
    "CAIRN_SCHEDULER_INTERVAL": "0.1",
    "CAIRN_WORKFLOWS": "cairn.demo.skill",
}


@app.command()
def demo(
    home: Annotated[
        Path | None,
        typer.Option(
            help="Where to keep the demo's SQLite database (default: a new temporary folder)."
        ),
    ] = None,
    kill_at: Annotated[
        str, typer.Option(help="The step during which the worker is killed.")
    ] = "draft",
    pace: Annotated[float, typer.Option(help="Scale every step's duration.")] = 1.0,
) -> None:
    """Run a research-brief agent skill, crash its worker mid-step, and resume it."""
    from cairn.client import Client
    from cairn.config import Settings
    from cairn.demo.skill import STEPS

    if kill_at not in STEPS:
        raise typer.BadParameter(f"--kill-at must be one of {STEPS}")
    home = home or Path(tempfile.mkdtemp(prefix="cairn-demo-"))
    home.mkdir(parents=True, exist_ok=True)
    ledger = home / "executions.log"
    ledger.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(DEMO_ENV, CAIRN_HOME=str(home))
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
    client = Client(settings)
    out.print(
        f"[bold]cairn demo[/bold]: embedded (SQLite at {settings.effective_database_url},"
        " nodes on worker threads), no services needed\n"
    )
    worker = _start_worker(env, home, 1)
    try:
        run_id = client.submit(
            "research_brief",
            {"topic": "durable workflows for AI agents", "ledger": str(ledger), "pace": pace},
        )
        out.print(f"submitted run {run_id}")
        crash = _Crash(env, home, worker, kill_at)
        crash.follow(client, run_id, ledger)
        worker = crash.worker
        _summary(client, run_id, ledger, crash.killed_during, crash.finished_before)
    finally:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(timeout=10)
        client.close()
    out.print(f"\nthe demo's database and logs are in {home}")


@dataclass
class _Crash:
    """The demo's worker, killed once during ``kill_at`` and started again."""

    env: dict[str, str]
    home: Path
    worker: subprocess.Popen[bytes]
    kill_at: str
    killed_during: str | None = None
    finished_before: dict[str, int] = field(default_factory=dict)

    def follow(self, client: Client, run_id: str, ledger: Path) -> None:
        """Show the run's progress until it ends, crashing the worker on the way."""
        from rich.live import Live

        with Live(
            _progress(client.get_run(run_id), None), console=out, refresh_per_second=8
        ) as live:
            while True:
                view = client.get_run(run_id)
                live.update(_progress(view, self.killed_during))
                if view.status.terminal:
                    return
                if self.killed_during is None and _started(ledger, self.kill_at):
                    self.kill(client, run_id)
                    live.update(_progress(client.get_run(run_id), self.killed_during))
                    time.sleep(0.5)
                    self.worker = _start_worker(self.env, self.home, 2)
                time.sleep(0.1)

    def kill(self, client: Client, run_id: str) -> None:
        time.sleep(0.1)  # well inside the step, whatever the pace
        os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait()
        self.killed_during = self.kill_at
        self.finished_before = _finished_steps(client.get_run(run_id))


def _start_worker(env: dict[str, str], home: Path, number: int) -> subprocess.Popen[bytes]:
    with open(home / f"worker-{number}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "cairn.cli", "worker", "--concurrency=1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _started(ledger: Path, step: str) -> bool:
    return ledger.exists() and any(
        line.split()[0] == step for line in ledger.read_text().splitlines()
    )


def _finished_steps(view: RunView) -> dict[str, int]:
    """Steps that had a recorded result, with the event seq that recorded it."""
    assert view.state is not None
    return {
        name: view.last_seq
        for name, node in view.state.nodes.items()
        if node.status.value == "succeeded"
    }


def _progress(view: RunView, killed_during: str | None) -> Table:
    from rich.table import Table

    from cairn.demo.skill import STEPS

    nodes = view.state.nodes if view.state is not None else {}
    table = Table(title=f"run {view.id[:8]}: {view.status.value}", title_justify="left")
    table.add_column("step")
    table.add_column("status")
    for step in STEPS:
        node = nodes.get(step)
        status = node.status.value if node is not None else ""
        if step == killed_during and status != "succeeded":
            status += "  (its worker was killed: SIGKILL)"
        table.add_row(step, status)
    done = sum(1 for s in STEPS if s in nodes and nodes[s].status.value == "succeeded")
    table.caption = f"{done}/{len(STEPS)} steps done"
    return table


def _summary(
    client: Client,
    run_id: str,
    ledger: Path,
    killed_during: str | None,
    finished_before_crash: dict[str, int],
) -> None:
    from rich.table import Table

    from cairn.demo.skill import STEPS

    view = client.get_run(run_id)
    executions: Counter[str] = Counter(line.split()[0] for line in ledger.read_text().splitlines())
    table = Table(title="what happened", title_justify="left")
    for column in ("step", "executions", "on resume"):
        table.add_column(column)
    for step in STEPS:
        if step in finished_before_crash:
            why = "skipped: its result was already recorded (idempotency table)"
        elif step == killed_during:
            why = "re-run: it was in flight when the worker died (no result, lease expired)"
        else:
            why = "ran after the resume"
        table.add_row(step, str(executions[step]), why)
    out.print(table)
    state: Any = view.state
    out.print(
        f"run {view.status.value}; {len(state.messages)} agent messages and the search "
        f"session {state.sessions.get('search')} were restored from the checkpoint"
    )
    if view.status.value != "succeeded":
        raise typer.Exit(1)
