"""Approvals bound to people, in the pure decider: who may decide a wait (``approvers``),
how many must agree (``quorum``, each vote recorded), the answer's shape (``response``),
signals kept for a wait not open yet (``accept_early``), two waits open at once; and
the definition faults of each. On real services: tests/integration/test_approvals.py."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.definitions.loader import load_definition
from cairn.errors import (
    EventRejected,
    Forbidden,
    InvalidInput,
    NotWaiting,
    WorkflowDefinitionError,
)
from cairn.model.statuses import RunStatus
from cairn.testing.driver import Driver

SCHEMA = {
    "type": "object",
    "required": ["answer"],
    "properties": {"answer": {"type": "string", "maxLength": 20}},
    "additionalProperties": False,
}


def review(**wait: Any) -> dict[str, Any]:
    return {
        "name": "review",
        "version": 1,
        "start": "draft",
        "nodes": {
            "draft": {"handler": "tests.unit.handlers:noop", "next": "decide"},
            "decide": {
                "wait": {
                    "signals": {"approve": "publish", "reject": "rejected"},
                    "timeout": "1h",
                    "on_timeout": "rejected",
                    **wait,
                }
            },
            "publish": {"handler": "tests.unit.handlers:noop", "next": "done"},
            "done": {"end": "succeeded"},
            "rejected": {"end": "failed"},
        },
    }


def waiting(**wait: Any) -> Driver:
    driver = Driver(load_definition(review(**wait)))
    driver.start()
    driver.succeed("draft")
    assert driver.state.status is RunStatus.WAITING
    return driver


def test_only_its_approvers_decide_a_wait_and_a_refusal_changes_nothing() -> None:
    driver = waiting(approvers=["role:operator", "alice"])
    before = driver.state.to_dict()
    with pytest.raises(Forbidden, match="approvers are role:operator, alice"):
        driver.signal("approve", actor="key:bob", role="approver")
    assert driver.state.to_dict() == before  # the decider raised: no new state
    driver.signal("approve", actor="person:alice", role="viewer")  # named: any kind
    assert driver.state.vars["decisions"]["decide"]["actor"] == "person:alice"
    higher = waiting(approvers=["role:approver"])
    higher.signal("approve", actor="key:ops", role="admin")  # a higher role may
    assert higher.outstanding == ["publish"]


def test_a_quorum_needs_that_many_distinct_principals_each_vote_recorded() -> None:
    driver = waiting(approvers=["role:approver"], quorum=2)
    driver.signal("approve", actor="key:ann", role="approver")
    driver.signal("approve", actor="key:ann", role="approver")  # twice: one vote
    assert driver.state.status is RunStatus.WAITING and driver.outstanding == []
    assert driver.state.nodes["decide"].votes == {"approve": ["key:ann"]}
    driver.signal("reject", actor="key:bea", role="approver")  # a vote for another signal
    driver.signal("approve", actor="key:cid", role="approver", comment="agreed")
    assert driver.outstanding == ["publish"]
    decision = driver.state.vars["decisions"]["decide"]
    assert (decision["actor"], decision["votes"], decision["comment"]) == (
        "key:cid",
        ["key:ann", "key:cid"],
        "agreed",
    )


def test_an_answer_outside_its_schema_is_refused_an_edited_one_in_it_is_kept() -> None:
    driver = waiting(response={"approve": SCHEMA})
    for payload in ({}, {"answer": 42}, {"answer": "x" * 21}, {"answer": "ok", "more": 1}):
        with pytest.raises(InvalidInput, match="response schema"):
            driver.signal("approve", payload=payload, actor="key:ann", role="approver")
    assert driver.state.status is RunStatus.WAITING
    driver.signal("approve", payload={"answer": "edited"}, actor="key:ann", role="approver")
    assert driver.state.vars["decisions"]["decide"]["payload"] == {"answer": "edited"}


def test_an_early_signal_is_kept_for_its_wait_and_applied_when_it_opens() -> None:
    driver = Driver(load_definition(review(accept_early=True)))
    driver.start()
    with pytest.raises(NotWaiting):  # naming no wait: refused, as ever
        driver.signal("approve", actor="key:ann", role="approver")
    driver.signal("approve", wait="decide", payload={"via": "email"}, actor="key:ann")
    with pytest.raises(EventRejected, match="keeps one early signal"):
        driver.signal("reject", wait="decide", actor="key:bea")
    assert driver.state.early["decide"]["name"] == "approve"
    driver.succeed("draft")  # the wait opens, and the kept signal decides it
    assert driver.outstanding == ["publish"] and not driver.state.early
    assert driver.state.vars["decisions"]["decide"]["payload"] == {"via": "email"}


def test_a_wait_with_approvers_never_accepts_early_and_faults_are_named() -> None:
    for wait, code in (
        ({"approvers": ["alice"], "accept_early": True}, "early_approval"),
        ({"approvers": ["role:boss"]}, "bad_value"),
        ({"approvers": ["alice"], "quorum": 2}, "bad_value"),
        ({"quorum": 0}, "bad_value"),
        ({"response": {"maybe": SCHEMA}}, "bad_value"),
        ({"response": {"approve": {"type": "nonsense"}}}, "bad_schema"),
        ({"context": {"fields": "answer"}}, "bad_value"),
        ({"context": {"feilds": ["answer"]}}, "unknown_key"),
    ):
        with pytest.raises(WorkflowDefinitionError) as refused:
            load_definition(review(**wait))
        assert code in {fault.code for fault in refused.value.faults}, (wait, refused.value)


def test_two_waits_open_at_once_are_each_answered_by_name() -> None:
    """Legal and finance approve in parallel, each a wait that is a branch: its signal
    ends the branch (succeeded or failed) and the join decides what follows."""
    spec = {
        "name": "two",
        "version": 1,
        "start": "both",
        "nodes": {
            "both": {"parallel": ["legal", "finance", "draft"], "next": "done"},
            "legal": {"wait": {"signals": {"ok": "succeeded", "no": "failed"},
                               "timeout": "1h", "on_timeout": "failed"}},
            "finance": {"wait": {"signals": {"ok": "succeeded", "no": "failed"},
                                 "timeout": "1h", "on_timeout": "failed"}},
            "draft": {"handler": "tests.unit.handlers:noop"},
            "done": {"end": "succeeded"},
        },
    }  # fmt: skip
    driver = Driver(load_definition(spec))
    driver.start()
    assert sorted(w.node for w in driver.state.waits) == ["finance", "legal"]
    assert driver.state.status is RunStatus.RUNNING  # draft runs meanwhile
    with pytest.raises(EventRejected, match="name the one it answers"):
        driver.signal("ok", actor="key:ann")
    driver.signal("ok", wait="finance", actor="key:ann")
    assert [w.node for w in driver.state.waits] == ["legal"]
    driver.succeed("draft")
    assert driver.state.status is RunStatus.WAITING  # legal still waits for a person
    driver.signal("ok", actor="key:bea")  # the only wait open: named or not
    assert driver.state.status is RunStatus.SUCCEEDED
    assert set(driver.state.vars["decisions"]) == {"legal", "finance"}
    refused = Driver(load_definition(spec))
    refused.start()
    refused.signal("no", wait="legal", actor="key:ann")  # one branch failed: the join fails
    assert refused.state.status is RunStatus.FAILED
    assert refused.state.waits == []  # the other wait closed with it
    bad = {**spec, "nodes": {**spec["nodes"], "legal": {"wait": {
        "signals": {"ok": "done"}, "timeout": "1h", "on_timeout": "failed"}}}}  # fmt: skip
    with pytest.raises(WorkflowDefinitionError, match="end the branch"):
        load_definition(bad)
