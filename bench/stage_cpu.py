"""The CPU a worker's pool child spends in each stage of a step, for
``python -m bench.step_profile --stages`` (which names this module in the fleet's
``CAIRN_WORKFLOWS``, so that each worker imports it; it defines no workflow).

In each pool child, from its start, the stages of :meth:`cairn.workers.runner.NodeRunner
.stages` and a few of their parts are wrapped to add up the thread's CPU time
(``time.thread_time``: the kernel's time for its system calls included, its waits not);
at the child's shutdown the sums, the calls and the child's own CPU go to a JSON file in
``BENCH_STAGES_DIR``. ``BENCH_STAGES_MORE`` names more to count (:func:`_more`), e.g.
``--set BENCH_STAGES_MORE=cairn.engine.optimistic:OneStatement._tell``. Counting costs a
few microseconds a wrapped call.
"""

from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery.signals import worker_process_init, worker_process_shutdown

# (module, object in it or None, function, label): what is counted, outermost first.
WRAPPED = (
    ("cairn.workers.runner", "NodeRunner", "run", "the task's body"),
    *(
        ("cairn.workers.runner", None, stage, stage)
        for stage in ("read", "admit", "hold", "execute", "commit", "release", "settle")
    ),
    ("cairn.engine.optimistic", "OneStatement", "_plan", "commit: planning"),
    ("cairn.engine.optimistic", "OneStatement", "_write", "commit: the statement"),
    ("cairn.lease.redis", "RedisLeases", "acquire", "lease: acquire"),
    ("cairn.lease.redis", "RedisLeases", "release", "lease: release"),
)

_cpu: collections.defaultdict[str, float] = collections.defaultdict(float)
_calls: collections.Counter[str] = collections.Counter()
_started = [0.0]


def _counted(function: Callable[..., Any], label: str) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        began = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            _cpu[label] += time.thread_time() - began
            _calls[label] += 1

    return counted


def _more() -> list[tuple[str, str | None, str, str]]:
    """More to count, from ``BENCH_STAGES_MORE``: ``module:function`` or
    ``module:Class.method``, comma-separated (each labelled so)."""
    more: list[tuple[str, str | None, str, str]] = []
    for spec in filter(None, os.environ.get("BENCH_STAGES_MORE", "").split(",")):
        module_name, _, qualified = spec.partition(":")
        owner_name, _, name = qualified.rpartition(".")
        more.append((module_name, owner_name or None, name, qualified))
    return more


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _wrap(**_kwargs: Any) -> None:
    import importlib  # noqa: PLC0415

    for module_name, owner_name, name, label in (*WRAPPED, *_more()):
        module = importlib.import_module(module_name)
        owner = module if owner_name is None else getattr(module, owner_name)
        setattr(owner, name, _counted(getattr(owner, name), label))
    _started[0] = time.process_time()


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _write(**_kwargs: Any) -> None:
    folder = os.environ.get("BENCH_STAGES_DIR")
    if folder is None or not _calls:
        return
    cpu = {**_cpu, "the child, all of it": time.process_time() - _started[0]}
    counted = {"cpu": cpu, "calls": dict(_calls)}
    Path(folder, f"stages-{os.getpid()}.json").write_text(json.dumps(counted))


def report(folder: Path) -> None:
    """The children's sums, per task (a message a child ran, its continued steps in it)."""
    cpu: collections.defaultdict[str, float] = collections.defaultdict(float)
    calls: collections.Counter[str] = collections.Counter()
    for path in folder.glob("stages-*.json"):
        counted = json.loads(path.read_text())
        for label, used in counted["cpu"].items():
            cpu[label] += used
        calls.update(counted["calls"])
    tasks = calls[WRAPPED[0][3]]
    if not tasks:
        print("\nno stage counts (was the worker stopped before writing them?)")
        return
    print(f"\nthe pool children's CPU by stage, over {tasks} tasks (warm-up included):")
    print(f"  {'':<24} {'ms/task':>8} {'calls/task':>11}")
    for label, used in sorted(cpu.items(), key=lambda item: -item[1]):
        shown = f"{calls[label] / tasks:11.2f}" if label in calls else f"{'':>11}"
        print(f"  {label:<24} {used * 1000 / tasks:8.3f} {shown}")
