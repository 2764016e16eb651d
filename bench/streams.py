"""Thousands of open run streams on one API process: how soon each sees its run's events.

    python -m bench.streams                      # 2,000 streams, beside 20, at 100 events/s

A real ``cairn api`` on PostgreSQL and Redis; each stream follows a run of its own, a
wait that loops on a ``tick`` signal, so that every signal appends one event. Signals go
to the watched runs round robin at a steady total rate. For each event: the time from
its append (its ``at``, the database's clock on this host) to a client reading it. Each
size gets a fresh API process; printed: event latency p50/p99 and the API process's
threads and RSS while every stream is open. The baseline is the same with ``--baseline``
streams, in the same run. The client reads SSE over plain asyncio connections (not an
HTTP library) so that the 2,000 readers cost the shared cores as little as it can.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import resource
import socket
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chain import admin, api_ready, cairn_env, fresh_database, spawn, stop

KEY = "bench-streams-key-0123456789ab"
WORKFLOW = """\
name: bench_ticks
version: 1
start: listen
nodes:
  listen: {wait: {signals: {tick: listen, stop: done}, timeout: 1h, on_timeout: done},
           max_visits: 1000000}
  done:   {end: succeeded}
"""
SENDERS = 8
SENDER_START_S = 5.0  # for the senders' processes to start, before the clock runs
OPEN_BATCH = 100  # streams opened at once (the listen backlog stays far from full)


@dataclass
class Phase:
    streams: int
    latencies_s: list[float] = field(default_factory=list)
    threads: int = 0
    rss_mb: float = 0.0
    open_s: float = 0.0
    missed: int = 0
    sent_rate: float = 0.0
    cpu_percent: float = 0.0  # of one core, the API process, while events flowed

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cpu_s(pid: int) -> float:
    """The process's CPU seconds so far (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_status(pid: int) -> tuple[int, float]:
    """The process's threads and resident memory (MB), from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    threads = re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE)
    rss = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert threads is not None and rss is not None
    return int(threads.group(1)), int(rss.group(1)) / 1024


async def _follow(port: int, run_id: str, opened: asyncio.Event, phase: Phase) -> None:
    """One stream: each event's latency into ``phase``, until cancelled."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(
        f"GET /v1/runs/{run_id}/stream HTTP/1.1\r\nHost: bench\r\n"
        f"Authorization: Bearer {KEY}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    try:
        while await reader.readline() not in (b"\r\n", b""):  # the response's head
            pass
        kind = ""
        while line := await reader.readline():
            text = line.decode().rstrip("\r\n")
            if text.startswith("event: "):
                kind = text[7:]
            elif text.startswith("data: ") and kind == "signal_received":
                phase.latencies_s.append(time.time() - json.loads(text[6:])["at"])
            elif text.startswith("data: ") and kind == "run_started":
                opened.set()  # the first event: the stream is open and read
    finally:
        writer.close()


def _signal_steadily(
    env: dict[str, str], runs: list[str], rate: float, start_at: float, seconds: float
) -> int:
    """Ticks to the runs, round robin, ``rate`` a second for ``seconds`` from ``start_at``
    (epoch); how many (in a process of its own: the readers must not wait on commits)."""
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    client = Client(Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")}))
    time.sleep(max(0.0, start_at - time.time()))  # every sender started and connected
    sent, started = 0, time.monotonic()
    try:
        while time.monotonic() < started + seconds:
            client.signal(runs[sent % len(runs)], "tick", {})
            sent += 1
            time.sleep(max(0.0, started + sent / rate - time.monotonic()))
    finally:
        client.close()
    return sent


async def _phase(port: int, pid: int, env: dict[str, str], runs: list[str], args: Any) -> Phase:
    phase = Phase(len(runs))
    opened = [asyncio.Event() for _ in runs]
    started = time.monotonic()
    readers = []
    for first in range(0, len(runs), OPEN_BATCH):
        batch = range(first, min(first + OPEN_BATCH, len(runs)))
        readers += [asyncio.create_task(_follow(port, runs[i], opened[i], phase)) for i in batch]
        await asyncio.wait_for(asyncio.gather(*(opened[i].wait() for i in batch)), 120)
    phase.open_s = time.monotonic() - started
    start_at = time.time() + SENDER_START_S
    stop_at = time.monotonic() + SENDER_START_S + args.seconds
    # Senders side by side: one signal is a few commits, and one sender alone falls short.
    loop = asyncio.get_running_loop()
    pool = ProcessPoolExecutor(SENDERS, mp_context=multiprocessing.get_context("spawn"))
    sending = [
        loop.run_in_executor(
            pool,
            _signal_steadily,
            env,
            runs[i::SENDERS],
            args.rate / SENDERS,
            start_at,
            args.seconds,
        )
        for i in range(min(SENDERS, len(runs)))
    ]
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu_before, started = _cpu_s(pid), time.monotonic()
    sampled = asyncio.create_task(_sample(pid, phase, stop_at))
    sent = sum(await asyncio.gather(*sending))
    # Off the loop: the readers go on reading while the senders' processes exit.
    shutdown = asyncio.create_task(asyncio.to_thread(pool.shutdown))
    phase.sent_rate = sent / args.seconds
    phase.cpu_percent = 100 * (_cpu_s(pid) - cpu_before) / (time.monotonic() - started)
    await asyncio.sleep(2.0)  # the last events' way to their streams
    await sampled
    phase.missed = sent - len(phase.latencies_s)
    for reader in readers:
        reader.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    await shutdown
    return phase


async def _sample(pid: int, phase: Phase, until: float) -> None:
    """The API process's highest thread count and RSS while every stream is open."""
    while time.monotonic() < until:
        threads, rss_mb = _proc_status(pid)
        phase.threads, phase.rss_mb = max(phase.threads, threads), max(phase.rss_mb, rss_mb)
        await asyncio.sleep(0.5)


def _run_phase(env: dict[str, str], runs: list[str], args: Any, log: Path) -> Phase:
    port = free_port()
    api_env = {**env, "CAIRN_API_KEYS": f"default:{KEY}"}
    server = spawn([sys.executable, "-m", "cairn.cli", "api", f"--port={port}"], api_env, log)
    try:
        api_ready(f"http://127.0.0.1:{port}")
        return asyncio.run(_phase(port, server.pid, env, runs, args))
    finally:
        stop(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--baseline", type=int, default=20, help="streams of the baseline")
    parser.add_argument("--rate", type=float, default=100.0, help="events a second, in all")
    parser.add_argument("--seconds", type=float, default=20.0, help="of steady signals")
    args = parser.parse_args()
    from cairn.client import Client  # noqa: PLC0415
    from cairn.config import Settings  # noqa: PLC0415

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a socket per stream, twice
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.streams + 256)), hard))
    phases: list[Phase] = []
    with tempfile.TemporaryDirectory() as tmp:
        definition = Path(tmp) / "bench_ticks.yaml"
        definition.write_text(WORKFLOW)
        database, url = fresh_database("cairn_bench_streams")
        env = cairn_env(url, broker_db=12, leases_db=13, CAIRN_WORKFLOWS=str(definition))
        client = Client(Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")}))
        try:
            for size in (args.baseline, args.streams):
                runs = [client.submit("bench_ticks") for _ in range(size)]
                phases.append(_run_phase(env, runs, args, Path(tmp) / f"api-{size}.log"))
        finally:
            client.close()
            with admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    _report(phases, args)


def _report(phases: list[Phase], args: Any) -> None:
    print(
        f"one API process; {args.rate:.0f} events/s asked for {args.seconds:.0f} s, round robin "
        f"over the runs, a stream per run\n"
        f"{'streams':>8} {'events':>7} {'p50 ms':>8} {'p99 ms':>8} {'threads':>8} "
        f"{'RSS MB':>7} {'CPU %':>6} {'opened in':>10} {'missed':>7} {'sent/s':>7}"
    )
    for phase in phases:
        label = f"{phase.streams}" + (" (baseline)" if phase is phases[0] else "")
        print(
            f"{label:>8} {len(phase.latencies_s):>7} {phase.percentile_ms(0.5):>8.1f} "
            f"{phase.percentile_ms(0.99):>8.1f} {phase.threads:>8} {phase.rss_mb:>7.0f} "
            f"{phase.cpu_percent:>6.0f} "
            f"{phase.open_s:>9.1f}s {phase.missed:>7} {phase.sent_rate:>7.0f}"
        )


if __name__ == "__main__":
    main()
