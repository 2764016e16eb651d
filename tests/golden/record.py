"""Record the golden event logs: ``python -m tests.golden.record [CASE ...]``.

Each case below runs representative workflows through the real engine (see
:mod:`tests.golden.engine`) and writes ``logs/<case>.json``: the definitions as the store
holds them (spec, and the format they were registered under), and per run its events
exactly as stored (seq, type, data, the decision's outcome), its snapshots' states and
its final cached state. ``test_golden.py`` replays those events through today's decider.

Recording twice writes the same files. Regenerating them is a deliberate act (see
README.md): it declares that runs recorded before a change no longer need to read as
they did, so do it only for a change meant to alter what old histories mean, and let
``git diff tests/golden/logs`` show the reviewer what it did to them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from cairn.model.definition import ErrorClass
from cairn.model.events import Phase
from tests.golden.engine import HANDLERS, Case, Engine, record

LOGS = Path(__file__).resolve().parent / "logs"

STEP = f"{HANDLERS}:step"
UNDO = f"{HANDLERS}:undo"
# What a worker's result carries about where the time went (informational; the decider
# never reads it, but an old log has it and must still parse).
TIMINGS = {"queue": 0.004, "run": 0.25, "model": 0.2}


# -- a linear chain ---------------------------------------------------------------------

CHAIN = f"""
name: chain
version: 1
start: fetch
nodes:
  fetch:  {{handler: "{STEP}", next: choose}}
  choose: {{route: {{key: kind, table: {{express: ship}}, default: pack}}}}
  pack:   {{handler: "{STEP}", next: ship}}
  ship:   {{handler: "{STEP}", next: done}}
  done:   {{end: succeeded}}
"""


def chain(engine: Engine) -> None:
    engine.submit("chain", kind="standard")
    engine.run("fetch", timings=TIMINGS)
    engine.run("pack", timings=TIMINGS)
    engine.run("ship")


# -- retries, then success --------------------------------------------------------------

RETRIES = f"""
name: retries
version: 1
start: call
nodes:
  call:   {{handler: "{STEP}", next: notify,
            retry: {{attempts: 4, backoff: 2s, max_delay: 10s}}}}
  notify: {{handler: "{STEP}", next: done}}
  done:   {{end: succeeded}}
"""


def retries(engine: Engine) -> None:
    engine.submit("retries")
    engine.fail("call", ErrorClass.TRANSIENT, "HTTP 503")
    engine.fire("retry:call:")
    engine.fail("call", ErrorClass.TRANSIENT, "connection reset by peer")
    engine.fire("retry:call:")
    engine.lose("call")  # an audit entry: history, not the decider's input
    engine.run("call")
    # notify declares no retry: format 2's default policy retries it.
    engine.fail("notify", ErrorClass.TRANSIENT, "HTTP 429")
    engine.fire("retry:notify:")
    engine.run("notify")


# -- a permanent failure, compensated (a saga) ------------------------------------------

SAGA = f"""
name: saga
version: 1
start: reserve
nodes:
  reserve: {{handler: "{STEP}", next: charge, compensate: "{UNDO}"}}
  charge:  {{handler: "{HANDLERS}:quote", next: ship, compensate: "{UNDO}"}}
  ship:    {{handler: "{STEP}", next: done}}
  done:    {{end: succeeded}}
"""


def saga(engine: Engine) -> None:
    engine.submit("saga", seats=2)
    engine.run("reserve")
    engine.run("charge")
    engine.fail("ship", ErrorClass.PERMANENT, "the address was rejected")
    # Undone last first; the first try of charge's compensation meets an outage.
    engine.fail("charge", ErrorClass.TRANSIENT, "HTTP 502", phase=Phase.COMPENSATE)
    engine.fire("compensation_retry:")
    engine.run("charge", phase=Phase.COMPENSATE)
    engine.run("reserve", phase=Phase.COMPENSATE)


# -- a parallel fan-out and join, with a budget -----------------------------------------

FAN_OUT = f"""
name: fan_out
version: 1
start: fan
budget: {{tokens: 900}}
nodes:
  fan:
    parallel: [web, papers, code]
    join: {{policy: quorum, k: 2, rest: cancel}}
    shares: {{web: 2}}
    next: write
  web:    {{handler: "{STEP}"}}
  papers: {{handler: "{STEP}"}}
  code:   {{handler: "{STEP}"}}
  write:  {{handler: "{STEP}", next: done}}
  done:   {{end: succeeded}}
"""

CRITICAL = f"""
name: critical
version: 1
start: fan
nodes:
  fan:
    parallel: [must, nice]
    join: {{policy: critical, critical: [must], timeout: 5m}}
    next: after
  must:  {{handler: "{STEP}"}}
  nice:  {{handler: "{STEP}", default: {{nice: "skipped"}}}}
  after: {{handler: "{STEP}", next: done}}
  done:  {{end: succeeded}}
"""


def fan_out(engine: Engine) -> None:
    engine.submit("fan_out", topic="golden logs")
    engine.run("papers", charges={"tokens": 120.0})
    engine.run("web", charges={"tokens": 340.5})  # the quorum: code is asked to stop
    engine.late("code")
    engine.run("write", charges={"tokens": 80.0})
    # A critical join whose other branch never answers: the join's timeout defaults it.
    engine.submit("critical")
    engine.run("must")
    engine.fire("join_timeout:")
    engine.run("after")


# -- waits: a signal received, and a wait that times out --------------------------------

APPROVAL = f"""
name: approval
version: 1
start: draft
nodes:
  draft:    {{handler: "{STEP}", next: review}}
  review:   {{wait: {{signals: {{approve: publish, reject: rejected}},
              timeout: 1d, on_timeout: expired}}}}
  publish:  {{handler: "{STEP}", next: done}}
  done:     {{end: succeeded}}
  rejected: {{end: failed}}
  expired:  {{end: cancelled}}
"""


def wait_signal(engine: Engine) -> None:
    engine.submit("approval", title="Q3 report")
    engine.run("draft")
    engine.tick(3600.0)
    engine.signal("approve", {"note": "ship it"}, node="review")
    engine.run("publish")
    engine.submit("approval", title="Q4 report")
    engine.run("draft")
    engine.fire("wait:review:")


# -- a cancel: stopped at a safe point, and one whose node never stops ------------------

CANCEL = f"""
name: cancel
version: 1
start: book
compensate_on_cancel: true
cancel_timeout: 30s
nodes:
  book: {{handler: "{STEP}", next: work, compensate: "{UNDO}"}}
  work: {{handler: "{STEP}", next: done}}
  done: {{end: succeeded}}
"""


def cancel(engine: Engine) -> None:
    engine.submit("cancel")
    engine.run("book")
    engine.cancel("the customer changed their mind")
    engine.stopped("work")
    engine.run("book", phase=Phase.COMPENSATE)
    engine.submit("cancel")
    engine.run("book")
    engine.cancel("the customer changed their mind")
    engine.fire("cancel:")  # work never stopped: it is detached
    engine.run("book", phase=Phase.COMPENSATE)


# -- rollbacks: everything, back to a checkpoint, one step; and a live fork ------------

BOOKING = f"""
name: booking
version: 1
start: reserve
nodes:
  reserve: {{handler: "{HANDLERS}:quote", next: charge, compensate: "{UNDO}"}}
  charge:  {{handler: "{STEP}", next: confirm, compensate: "{UNDO}"}}
  confirm: {{wait: {{signals: {{confirmed: done}}, timeout: 1h, on_timeout: done}}}}
  done:    {{end: succeeded}}
"""


def rollback(engine: Engine) -> None:
    engine.submit("booking", seats=1)
    engine.run("reserve")
    engine.run("charge")
    engine.rollback("booked twice")
    engine.run("charge", phase=Phase.COMPENSATE)
    engine.run("reserve", phase=Phase.COMPENSATE)

    engine.submit("booking", seats=2)
    engine.run("reserve")  # seq 2: the checkpoint, charge in progress
    engine.run("charge")
    engine.rollback("wrong card", to_seq=2)
    engine.run("charge", phase=Phase.COMPENSATE)
    engine.run("charge")  # again, as visit 2
    engine.signal("confirmed")

    engine.submit("booking", seats=3)
    engine.run("reserve")
    engine.run("charge")
    engine.rollback("seat upgrade", step="reserve")
    engine.run("reserve", phase=Phase.COMPENSATE)
    engine.signal("confirmed")


def fork(engine: Engine) -> None:
    engine.submit("booking", seats=1)
    engine.run("reserve")
    engine.run("charge")
    engine.fork(2, patch={"seats": 4})
    engine.run("charge")
    engine.signal("confirmed")


# -- a child workflow -------------------------------------------------------------------

TRIP = f"""
name: trip
version: 1
start: flights
budget: {{tokens: 500}}
nodes:
  flights: {{child: {{workflow: flight_search, input: [city], output: [price]}}, next: book}}
  book:    {{handler: "{STEP}", next: done}}
  done:    {{end: succeeded}}
"""

FLIGHT_SEARCH = f"""
name: flight_search
version: 1
start: search
nodes:
  search: {{handler: "{STEP}", next: pick}}
  pick:   {{handler: "{HANDLERS}:quote", next: done}}
  done:   {{end: succeeded}}
"""


def child(engine: Engine) -> None:
    parent = engine.submit("trip", city="Lisbon")
    (child_run,) = [n.child for n in engine.state().nodes.values() if n.child]
    assert child_run is not None
    engine.run_id = child_run
    engine.run("search", charges={"tokens": 60.0})
    engine.run("pick")  # the child ends: its parent's node finishes with it
    engine.run_id = parent
    engine.run("book")


# -- an agent loop: many visits, its context, and the anomaly watch ---------------------

AGENT = f"""
name: agent
version: 1
start: think
max_visits: 30
anomaly:
  fingerprint: {{fields: [plan, answer]}}
  no_progress: {{steps: 4}}
  on_detect:
    hint: "You keep making the same plan ({{kind}}). Try something else."
nodes:
  think: {{handler: "{HANDLERS}:think", next: act}}
  act:   {{handler: "{HANDLERS}:act",
           branch: {{guard: "{HANDLERS}:answered", cases: {{"true": done, "false": think}}}}}}
  done:  {{end: succeeded}}
"""


def agent(engine: Engine) -> None:
    engine.submit("agent", question="what changed?", answer_after=7)
    for visit in range(1, 8):
        query = {"role": "assistant", "content": f"searching, round {visit}"}
        engine.run("think", messages=[query], charges={"tokens": 50.0})
        engine.run(
            "act",
            messages=[{"role": "tool", "name": "search", "content": f"{visit} hits"}],
            sessions={"search": {"cursor": visit}},
        )


# -- held nodes, settled by an operator; a plan invalidated on resume -------------------

PAYOUT = f"""
name: payout
version: 1
start: quote
on_resume: {{check: "{HANDLERS}:quote_still_valid", replan: quote}}
nodes:
  quote:  {{handler: "{HANDLERS}:quote", next: pay, max_visits: 3}}
  pay:    {{handler: "{STEP}", next: notify, irreversible: true}}
  notify: {{handler: "{STEP}", next: done}}
  done:   {{end: succeeded}}
"""


def held(engine: Engine) -> None:
    engine.submit("payout", seats=1)
    engine.run("quote")
    engine.hold("pay", "irreversible: its worker died running it, and it may have taken effect")
    engine.signal("recovery.retry", actor="ops")
    engine.resume("pay")  # the quote went stale meanwhile: back to quote
    engine.run("quote")
    engine.hold("pay", "irreversible: its worker was lost, and it may have taken effect")
    engine.signal("recovery.complete", {"output": {"paid_by": "hand"}}, actor="ops")
    engine.run("notify")


# -- node timeouts ----------------------------------------------------------------------

TIMEOUTS = f"""
name: timeouts
version: 1
start: slow
node_timeout: 10m
nodes:
  slow: {{handler: "{STEP}", next: wrap, timeout: 30s,
          retry: {{attempts: 2, backoff: 1s, jitter: none}}}}
  wrap: {{handler: "{STEP}", next: done, retry: none}}
  done: {{end: succeeded}}
"""


def timeouts(engine: Engine) -> None:
    engine.submit("timeouts")
    engine.time_out("slow")
    engine.fire("retry:slow:")
    engine.run("slow")
    engine.time_out("wrap")  # the workflow's node_timeout, and no retry left: failed


# -- runs migrated between versions: one goes on, one is moved back ---------------------

RELOCATION_V1 = f"""
name: relocation
version: 1
start: prepare
nodes:
  prepare: {{handler: "{STEP}", next: review}}
  review:  {{wait: {{signals: {{approve: publish, reject: refused}}, timeout: 1h,
             on_timeout: refused}}}}
  publish: {{handler: "{STEP}", next: done}}
  done:    {{end: succeeded}}
  refused: {{end: failed}}
"""

RELOCATION_V2 = f"""
name: relocation
version: 2
start: prepare
state: {{type: object, required: [steps], properties: {{steps: {{type: integer}}}}}}
nodes:
  prepare:  {{handler: "{STEP}", next: approval}}
  approval: {{wait: {{signals: {{approve: check, reject: refused}}, timeout: 2h,
              on_timeout: refused}}}}
  check:    {{handler: "{STEP}", next: publish}}
  publish:  {{handler: "{STEP}", next: done}}
  done:     {{end: succeeded}}
  refused:  {{end: failed}}
"""


def migrated(engine: Engine) -> None:
    # Moved to version 2 while it waits, then approved there: version 2's nodes run.
    engine.submit("relocation", version=1)
    engine.run("prepare")
    engine.migrate(2, f"{HANDLERS}:renamed")
    engine.signal("approve")
    engine.run("check")
    engine.run("publish")
    # Moved, then moved back before anything happened on version 2: version 1 goes on,
    # its review's deadline as it was.
    engine.submit("relocation", version=1)
    engine.run("prepare")
    engine.migrate(2, f"{HANDLERS}:renamed")
    engine.unmigrate()
    engine.signal("approve")
    engine.run("publish")


# -- patch markers: a run that passed the point before the patch, and one after ---------

PRICING = f"""
name: pricing
version: 1
start: price
nodes:
  price:  {{handler: "{STEP}", next: review, max_visits: 10}}
  review: {{wait: {{signals: {{again: price, approve: done}}, timeout: 1d, on_timeout: done}}}}
  done:   {{end: succeeded}}
"""


def patched(engine: Engine) -> None:
    # Priced on code without the patch (its result says nothing of it), then again on
    # code that asks: the node ran before, so the run keeps the old path (False).
    engine.submit("pricing", amount=2.5)
    engine.run("price")
    engine.signal("again")
    engine.run("price", patches={"fix-rounding": False})
    engine.signal("approve")
    # A run that reaches the point on code with the patch: True, kept through a failed
    # attempt (whose result carries the answer too) and its retry.
    engine.submit("pricing", amount=2.5)
    engine.fail("price", ErrorClass.TRANSIENT, "HTTP 503", patches={"fix-rounding": True})
    engine.fire("retry:price:")
    engine.run("price", patches={"fix-rounding": True, "tax-2027": True})
    engine.signal("again")
    engine.run("price", patches={"fix-rounding": True, "tax-2027": True})


# -- format 1: a definition registered before definition formats existed ----------------

LEGACY = f"""
name: legacy
version: 1
start: call
nodes:
  call:     {{handler: "{STEP}", next: done, on_error: {{transient: fallback}}}}
  fallback: {{handler: "{STEP}", next: done}}
  done:     {{end: succeeded}}
"""


def legacy(engine: Engine) -> None:
    # Format 1: no default retry (the transient failure takes its edge at once) and no
    # default timeout (no node_timeout timers).
    engine.submit("legacy")
    engine.fail("call", ErrorClass.TRANSIENT, "HTTP 503")
    engine.run("fallback")


# -- builds: the build that ran each node, pinned and auto-upgrade ----------------------

PINNED = f"""
name: pinned
version: 1
start: quote
versioning: pinned
nodes:
  quote:   {{handler: "{STEP}", next: approve}}
  approve: {{wait: {{signals: {{approve: book}}, timeout: 3d, on_timeout: expired}}}}
  book:    {{handler: "{STEP}", next: done, retry: {{attempts: 2, backoff: 1s}}}}
  done:    {{end: succeeded}}
  expired: {{end: cancelled}}
"""

UPGRADING = f"""
name: upgrading
version: 1
start: quote
versioning: auto-upgrade
nodes:
  quote:   {{handler: "{STEP}", next: approve}}
  approve: {{wait: {{signals: {{approve: book}}, timeout: 3d, on_timeout: expired}}}}
  book:    {{handler: "{STEP}", next: done}}
  done:    {{end: succeeded}}
  expired: {{end: cancelled}}
"""

BUILD_1 = "0.1.0-3f2a9c01b2de"
BUILD_2 = "0.1.0-8c41d07e95fa"


def builds(engine: Engine) -> None:
    # Pinned: every node on the build it started on, a failure's retry too.
    engine.submit("pinned", seats=2)
    engine.run("quote", build=BUILD_1)
    engine.tick(86400.0)
    engine.signal("approve", {"by": "ops"}, node="approve")
    engine.fail("book", ErrorClass.TRANSIENT, "HTTP 503", build=BUILD_1)
    engine.fire("retry:book:")
    engine.run("book", build=BUILD_1)
    # Auto-upgrade: started on build 1, its next node taken by build 2.
    engine.submit("upgrading", seats=1)
    engine.run("quote", build=BUILD_1)
    engine.tick(3600.0)
    engine.signal("approve", {"by": "ops"}, node="approve")
    engine.run("book", build=BUILD_2)


CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case("chain", "a linear chain through a routing decision", (CHAIN,), chain),
        Case(
            "retries", "transient failures retried, a lost message recovered", (RETRIES,), retries
        ),
        Case("saga", "a permanent failure: compensations, one retried", (SAGA,), saga),
        Case(
            "fan_out",
            "a quorum fan-out with a budget; a critical join that times out",
            (FAN_OUT, CRITICAL),
            fan_out,
        ),
        Case(
            "wait_signal",
            "a wait answered by a signal; one that times out",
            (APPROVAL,),
            wait_signal,
        ),
        Case("cancel", "cancels: a node stopped, a node detached; compensated", (CANCEL,), cancel),
        Case("rollback", "rollbacks: all, to a checkpoint, one step", (BOOKING,), rollback),
        Case("fork", "a live fork from a checkpoint, patched", (BOOKING,), fork),
        Case("child", "a child workflow run for a parent's node", (TRIP, FLIGHT_SEARCH), child),
        Case("agent", "an agent loop: many visits, messages, the anomaly watch", (AGENT,), agent),
        Case("held", "held nodes settled by an operator; re-planned on resume", (PAYOUT,), held),
        Case("timeouts", "node timeouts: retried, then failed", (TIMEOUTS,), timeouts),
        Case(
            "migrated",
            "runs migrated to a new version: one goes on there, one is moved back",
            (RELOCATION_V1, RELOCATION_V2),
            migrated,
        ),
        Case(
            "builds",
            "the build that ran each node: a pinned run, an auto-upgrade run moving on",
            (PINNED, UPGRADING),
            builds,
        ),
        Case(
            "format1",
            "a definition registered under format 1 (no default retry or timeout)",
            (LEGACY,),
            legacy,
            implied_format=1,
        ),
        Case(
            "patched",
            "patch markers: answers on result events, kept by the run's state",
            (PRICING,),
            patched,
        ),
    )
}


def write(case: Case, directory: Path = LOGS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{case.name}.json"
    path.write_text(json.dumps(record(case), indent=1) + "\n", encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record the golden event logs.")
    parser.add_argument("cases", nargs="*", help=f"cases to record (default: all): {list(CASES)}")
    args = parser.parse_args(argv)
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; known: {list(CASES)}")
    for name in args.cases or CASES:
        path = write(CASES[name])
        print(f"{path.name}: {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
