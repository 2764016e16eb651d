"""How soon each quick ``cairn`` command answers, against ``python -c pass``.

    python -m bench.cli --repeat 5

Every command runs as a whole process — ``python -m cairn.cli ARGS`` from the
repository, as an operator's shell runs ``cairn`` — ``--repeat`` times, each time right
after the baseline ``python -c pass`` (interleaved, so that the machine's load weighs on
both alike). The figures are medians: the time to the command's first byte of output,
to its exit, and the first output over the baseline's exit, against the budget of
0.3 s: a command that imports no handler code answers before its user wonders.

Every command runs once, untimed, before the timed rounds, with bytecode caching on
(PYTHONDONTWRITEBYTECODE unset for them): what is measured is an installed cairn, not
Python compiling its sources at every start.

The commands that read or answer runs do so on a fresh, migrated PostgreSQL database,
with Redis for the leases and the broker (CAIRN_TEST_POSTGRES, CAIRN_TEST_REDIS, as for
the tests), holding runs of a wait-only workflow: no worker runs, nothing executes —
what is measured is reading a run and answering it, not the work.

Each command is timed in three ways in the same run, so the ways are compared under the
same load: in direct mode (the database), in remote mode (``CAIRN_API_URL`` and a key,
against a ``cairn api`` this bench starts), and as a newcomer runs it — in a project
folder where ``cairn dev`` runs on the embedded default, with no setting at all (the
command finds the fleet's API by itself: docs/cli.md). Each way twice, alternating: as a
process of its own (``CAIRN_CLI_PRELOAD=0``), and handed to the preloaded command line
(docs/cli.md#the-preloaded-command-line) — the default, which the untimed round starts
and which the bench stops at its end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.chain import ROOT, admin, cairn_env, fresh_database

BUDGET_S = 0.3
API_KEY = "bench-cli-key-0123456789abcdef"
WORKFLOW = """\
name: bench_cli
version: 1
start: review
nodes:
  review:   {wait: {signals: {approve: done, reject: rejected}, timeout: 1h, on_timeout: rejected}}
  done:     {end: succeeded}
  rejected: {end: failed}
"""


@dataclass
class Timing:
    first_output_s: float
    exit_s: float


def timed(args: list[str], env: dict[str, str], cwd: Path = ROOT) -> Timing:
    """One process: seconds to its first byte on stdout (its exit, if it prints none),
    and to its exit. It must succeed."""
    started = time.perf_counter()
    process = subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    first = os.read(process.stdout.fileno(), 1)
    first_output = time.perf_counter()
    _out, errors = process.communicate()
    ended = time.perf_counter()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({process.returncode}): {errors.decode()}")
    return Timing((first_output if first else ended) - started, ended - started)


def commands(definition: Path, reading: str, answering: list[str]) -> list[tuple[str, list[str]]]:
    """(label, arguments) of each command, once per repetition: a signal and a cancel
    each need a waiting run of their own."""
    return [
        ("--help", ["--help"]),
        ("--version", ["--version"]),
        ("validate FILE.yaml", ["validate", str(definition)]),
        ("status RUN", ["status", reading]),
        ("runs", ["runs"]),
        ("events RUN", ["events", reading]),
        ("state RUN", ["state", reading]),
        ("waiting", ["waiting"]),
        ("calls RUN", ["calls", reading]),
        ("signal RUN approve", ["signal", answering[0], "approve"]),
        ("cancel RUN", ["cancel", answering[1], "--reason", "bench"]),
    ]


@dataclass
class Found:
    baseline: list[float]
    own: dict[str, list[Timing]]  # each command a process of its own
    preloaded: dict[str, list[Timing]]


def measure(
    env: dict[str, str],
    definition: Path,
    reading: str,
    answering: list[list[list[str]]],
    cwd: Path = ROOT,
) -> Found:
    """``answering``: a pair of fresh runs for each round and way, the warm-up's first."""
    cairn = [sys.executable, "-m", "cairn.cli"]
    own_env = {**env, "CAIRN_CLI_PRELOAD": "0"}
    found = Found([], {}, {})
    (warm, _), *rounds = answering
    for _label, args in commands(definition, reading, warm):
        timed([*cairn, *args], env, cwd)
    preloaded_listening(env)
    for own_runs, preloaded_runs in rounds:
        mine, theirs = (
            commands(definition, reading, own_runs),
            commands(definition, reading, preloaded_runs),
        )
        for (label, own_args), (_, preloaded_args) in zip(mine, theirs, strict=True):
            found.baseline.append(timed([sys.executable, "-c", "pass"], env, cwd).exit_s)
            found.own.setdefault(label, []).append(timed([*cairn, *own_args], own_env, cwd))
            found.preloaded.setdefault(label, []).append(timed([*cairn, *preloaded_args], env, cwd))
    return found


def preloaded_listening(env: dict[str, str]) -> None:
    """Wait for the preloaded command line the warm-up started (in the bench's own
    runtime folder) to listen."""
    from cairn.cli.preload import place  # noqa: PLC0415

    path = place.socket_path(env)
    deadline = time.monotonic() + 60
    while path is None or not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit("the preloaded command line did not start in 60 s")
        time.sleep(0.1)


def stop_preloaded(runtime: Path) -> None:
    for pid_file in runtime.glob("cairn/cli-*.pid"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)


@contextlib.contextmanager
def dev_fleet(project: Path) -> Iterator[tuple[dict[str, str], Any]]:
    """``cairn dev`` in ``project`` on the embedded default; the environment of a command
    there (no CAIRN_* setting at all) and an HTTP client of the fleet, to submit with."""
    from cairn.http import Client  # noqa: PLC0415

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    dev = subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "dev", "--workflows", "bench_cli.yaml",
         f"--port={port}"],
        cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        _ready(url, (project / ".cairn" / "dev.json").exists)
        key = (project / ".cairn" / "dev-api-key").read_text(encoding="utf-8").strip()
        with Client(url, key) as client:
            yield env, client
    finally:
        dev.send_signal(signal.SIGINT)
        dev.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ready(url: str, also: Callable[[], bool] = lambda: True) -> None:
    import httpx  # noqa: PLC0415

    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200 and also():
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not get ready in 60 s")
        time.sleep(0.1)


@contextlib.contextmanager
def remote_env(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """``cairn api`` on a free port, and the environment of remote-mode commands."""
    port = _free_port()
    api = subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "api", f"--port={port}"],
        cwd=ROOT,
        env={**env, "CAIRN_API_KEYS": f"default:{API_KEY}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _ready(url)
        yield {**env, "CAIRN_API_URL": url, "CAIRN_API_KEY": API_KEY}
    finally:
        api.terminate()
        api.wait(timeout=10)


def report(found: Found, repeat: int, mode: str) -> None:
    base = statistics.median(found.baseline)
    ms = 1000.0
    print(f"cairn commands ({mode}), median of {repeat} processes each: first output over")
    print(
        f"the baseline's exit (budget {BUDGET_S * ms:.0f} ms); python -c pass: {base * ms:.0f} ms\n"
    )
    print(f"{'command':<24} {'own process':>12} {'preloaded':>10} {'exit':>8}  budget")
    for label, timings in found.preloaded.items():
        own = statistics.median(t.first_output_s for t in found.own[label]) - base
        first = statistics.median(t.first_output_s for t in timings) - base
        ended = statistics.median(t.exit_s for t in timings) - base
        verdict = "ok" if first <= BUDGET_S else "OVER"
        print(
            f"cairn {label:<18} {own * ms:>+10.0f}ms {first * ms:>+8.0f}ms "
            f"{ended * ms:>+6.0f}ms  {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="processes per command")
    args = parser.parse_args()

    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        definition = Path(tmp) / "bench_cli.yaml"
        definition.write_text(WORKFLOW)
        runtime = Path(tmp) / "run"  # the bench's own preloaded command line
        runtime.mkdir(mode=0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
        database, url = fresh_database("cairn_bench_cli")
        env = cairn_env(url, broker_db=12, leases_db=13, CAIRN_WORKFLOWS=str(definition))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
        client = Client(settings)
        try:
            reading = client.submit("bench_cli")
            results = {"direct": measure(env, definition, reading, fresh(client, args.repeat))}
            with remote_env(env) as remote:
                answering = fresh(client, args.repeat)
                results["remote"] = measure(remote, definition, reading, answering)
            project = Path(tmp) / "project"
            project.mkdir()
            (project / "bench_cli.yaml").write_text(WORKFLOW)
            with dev_fleet(project) as (plain, fleet):
                ours = fleet.submit("bench_cli").run_id
                answering = fresh(fleet, args.repeat)
                mode = "beside cairn dev, no settings"
                results[mode] = measure(plain, definition, ours, answering, project)
        finally:
            stop_preloaded(runtime)
            client.close()
            with admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    for mode, found in results.items():
        report(found, args.repeat, mode)
        print()


def fresh(client: Any, repeat: int) -> list[list[list[str]]]:
    """Two pairs of waiting runs per round — one for each way — and for the warm-up (by
    the engine's client, or the HTTP client of a dev fleet)."""
    return [
        [[_submitted(client), _submitted(client)], [_submitted(client), _submitted(client)]]
        for _ in range(repeat + 1)
    ]


def _submitted(client: Any) -> str:
    answer = client.submit("bench_cli")
    return answer if isinstance(answer, str) else str(answer.run_id)


if __name__ == "__main__":
    main()
