"""Decorators, the builder and YAML: three forms of one definition, one compiler.

``tests/unit/decorated_claims.py`` declares a workflow with decorators on its handlers;
here the same workflow is written as YAML naming those handlers, and with the builder.
All three compile to equal definitions, and each one's faults are the loader's.
"""

from __future__ import annotations

import pytest

import cairn
from cairn.definitions.builder import Workflow
from cairn.definitions.catalog import discover
from cairn.definitions.loader import load_definition
from cairn.definitions.text import parse_text
from cairn.errors import WorkflowDefinitionError
from cairn.model.definition import WorkflowDefinition
from tests.unit import decorated_claims as claims
from tests.unit.decorated_claims import CLAIM_INPUT, CLAIM_STATE

M = "tests.unit.decorated_claims"

CLAIMS_YAML = f"""
name: expense_claim
version: 3
description: Receive, assess, approve if large, pay (undone on failure), notify.
input:
  type: object
  required: [employee, amount_eur]
  properties:
    employee: {{type: string, minLength: 1}}
    amount_eur: {{type: number, exclusiveMinimum: 0}}
    category: {{enum: [travel, meals, other]}}
  additionalProperties: false
state:
  type: object
  required: [employee, amount_eur]
  properties: {{amount_eur: {{type: number}}, reminded: {{type: integer}}}}
budget: {{usd: 5}}
reducers: {{reminded: add, notes: append}}
start: receive
nodes:
  receive:      {{handler: "{M}:receive", next: assess_claim,
                  retry: {{attempts: 4, backoff: 2s, max_delay: 1m}}}}
  assess_claim: {{handler: "{M}:assess",
                  branch: {{guard: "{M}:is_small", cases: {{"true": pay, "false": review}}}}}}
  review:       {{wait: {{signals: {{approve: pay, reject: refused}}, timeout: 48h,
                         on_timeout: remind, approvers: ["role:approver"], quorum: 2}}}}
  remind:       {{handler: "{M}:remind", next: review, max_visits: 2, timeout: 30s}}
  pay:          {{handler: "{M}:pay", next: notify, on_error: {{permanent: refused}},
                  compensate: "{M}:claw_back"}}
  notify:       {{parallel: [email, ledger], join: {{policy: critical, critical: [ledger]}},
                  next: file_claim}}
  email:        {{handler: "{M}:email", default: {{emailed: false}}}}
  ledger:       {{handler: "{M}:ledger"}}
  file_claim:   {{route: {{key: category, table: {{travel: done, meals: done}}, default: done}}}}
  done:         {{end: succeeded}}
  refused:      {{end: failed}}
"""


def from_yaml() -> WorkflowDefinition:
    return load_definition(parse_text(CLAIMS_YAML, ".yaml", source="claims.yaml"))


def built() -> Workflow:
    return (
        Workflow(
            "expense_claim",
            version=3,
            description="Receive, assess, approve if large, pay (undone on failure), notify.",
            input=CLAIM_INPUT,
            state=CLAIM_STATE,
            budget={"usd": 5},
            reducers={"reminded": "add", "notes": "append"},
        )
        .task(
            "receive",
            claims.receive,
            next="assess_claim",
            retry={"attempts": 4, "backoff": "2s", "max_delay": "1m"},
        )
        .task(
            "assess_claim",
            claims.assess,
            branch={"guard": claims.is_small, "cases": {True: "pay", False: "review"}},
        )
        .wait(
            "review",
            signals={"approve": "pay", "reject": "refused"},
            timeout="48h",
            on_timeout="remind",
            approval={"approvers": ["role:approver"], "quorum": 2},
        )
        .task("remind", claims.remind, next="review", max_visits=2, timeout="30s")
        .task(
            "pay",
            claims.pay,
            next="notify",
            on_error={"permanent": "refused"},
            compensate=claims.claw_back,
        )
        .parallel(
            "notify",
            ["email", "ledger"],
            join={"policy": "critical", "critical": ["ledger"]},
            next="file_claim",
        )
        .task("email", claims.email, default={"emailed": False})
        .task("ledger", claims.ledger)
        .task(
            "file_claim",
            route={
                "key": "category",
                "table": {"travel": "done", "meals": "done"},
                "default": "done",
            },
        )
        .end("done")
        .end("refused", "failed")
    )


def test_decorators_builder_and_yaml_compile_to_equal_definitions() -> None:
    decorated, yaml_form, builder_form = claims.claims.build(), from_yaml(), built().build()
    assert decorated == yaml_form == builder_form
    assert decorated.start == "receive"  # the first node declared
    compensate = decorated.nodes["pay"].compensate
    assert compensate is not None and compensate.target is claims.claw_back
    assert decorated.input_schema == CLAIM_INPUT
    assert decorated.state_schema == CLAIM_STATE
    assert decorated.reducers == {"reminded": "add", "notes": "append"}
    assert claims.claims.to_spec() == built().to_spec()


def test_the_equality_is_not_vacuous() -> None:
    changed = built()
    changed.nodes["remind"]["max_visits"] = 3
    assert changed.build() != claims.claims.build()
    uncompensated = built()
    del uncompensated.nodes["pay"]["compensate"]
    assert uncompensated.build() != claims.claims.build()
    unschematic = built()
    del unschematic.options["state"]
    assert unschematic.build() != claims.claims.build()
    unreduced = built()
    unreduced.options["reducers"] = {"reminded": "add"}
    assert unreduced.build() != claims.claims.build()


def test_decorated_handlers_stay_plain_functions() -> None:
    assert claims.receive(None, {}) == {"received": True}  # type: ignore[arg-type]
    assert claims.is_small({"amount_eur": 20}) is True


def test_a_module_level_decorated_workflow_is_discovered() -> None:
    (found,) = discover([M])
    assert found.error is None and found.source == f"{M}:claims"
    assert found.definition == from_yaml()


def test_a_compensation_of_no_node_and_a_second_compensation_are_faults() -> None:
    wf = cairn.workflow("faulty")

    @wf.compensation("nowhere")
    def undo(ctx: cairn.StepContext, state: cairn.State) -> None:
        return None

    wf.task(next="done")(claims.receive)
    wf.compensation("receive")(claims.claw_back)
    wf.compensation("receive")(claims.claw_back)
    wf.end("done")
    with pytest.raises(WorkflowDefinitionError) as caught:
        wf.build()
    assert {(fault.code, fault.node) for fault in caught.value.faults} == {
        ("unknown_target", "nowhere"),
        ("duplicate_name", "receive"),
    }


def test_a_compensation_beside_compensate_is_a_fault_and_a_node_twice_too() -> None:
    wf = cairn.workflow("twice")
    wf.task(next="done", compensate=claims.claw_back)(claims.receive)
    wf.compensation("receive")(claims.pay)
    wf.task("receive", next="done")(claims.assess)
    wf.end("done")
    with pytest.raises(WorkflowDefinitionError) as caught:
        wf.build()
    assert [(fault.code, fault.node) for fault in caught.value.faults] == [
        ("duplicate_name", "receive"),
        ("duplicate_name", "receive"),
    ]


def test_a_nested_handler_is_refused_by_the_loader_as_in_any_form() -> None:
    wf = cairn.workflow("nested")

    @wf.task(next="done")
    def inner(ctx: cairn.StepContext, state: cairn.State) -> cairn.State:
        return {}

    wf.end("done")
    with pytest.raises(WorkflowDefinitionError) as caught:
        wf.build()
    assert any("inner" in fault.message for fault in caught.value.faults)
