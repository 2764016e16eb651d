"""The declarative form (YAML/JSON) and the Python builder: loading, equality, validation.

Valid nodes use the real handlers of ``examples.flights`` with ``resolve=True``, so that
each broken definition shows only the fault it is about; tests compare the whole set of
fault codes where they can, so an unexpected extra fault fails the test too.
"""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from cairn import Workflow, WorkflowDefinitionError, load_definition, load_file
from cairn.definitions.text import parse_text
from cairn.errors import DefinitionFault
from cairn.model.definition import (
    DEFAULT_NODE_TIMEOUT,
    DEFAULT_RETRY,
    NO_RETRY,
    EndNode,
    ErrorClass,
    JoinPolicyKind,
    ParallelNode,
    TaskNode,
    WaitNode,
    WorkflowDefinition,
)
from cairn.model.statuses import RunStatus
from examples import flights

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOK_FLIGHT = REPO_ROOT / "examples" / "book_flight.yaml"
BROKEN = REPO_ROOT / "tests" / "fixtures" / "broken.yaml"

SEARCH = "examples.flights:search"
QUOTE = "examples.flights:quote"
SEND_EMAIL = "examples.flights:send_email"
SEND_SMS = "examples.flights:send_sms"
IS_CHEAP = "examples.flights:is_cheap"
AIRPORT = {"type": "string", "pattern": "^[A-Z]{3}$"}
BOOK_FLIGHT_INPUT = {
    "type": "object",
    "required": ["origin", "destination"],
    "properties": {
        "origin": {**AIRPORT, "description": "IATA airport code"},
        "destination": AIRPORT,
        "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
        "email": {"type": "string"},
        "phone": {"type": "string"},
        "follow_up": {"type": "string", "description": "the customer's message after booking"},
    },
    "additionalProperties": False,
}


# -- helpers -----------------------------------------------------------------------------


def spec_with(nodes: dict[str, Any], **top: Any) -> dict[str, Any]:
    """A definition mapping starting at ``a`` with an end node ``done`` added."""
    return {
        "name": "w",
        "version": 1,
        "start": "a",
        "nodes": {**nodes, "done": {"end": "succeeded"}},
        **top,
    }


def faults_of(spec: object, *, resolve: bool = True) -> list[DefinitionFault]:
    with pytest.raises(WorkflowDefinitionError) as caught:
        load_definition(spec, resolve=resolve)
    return caught.value.faults


def pairs(faults: list[DefinitionFault]) -> set[tuple[str, str | None]]:
    return {(fault.code, fault.node) for fault in faults}


def build_faults(wf: Workflow) -> list[DefinitionFault]:
    with pytest.raises(WorkflowDefinitionError) as caught:
        wf.build()
    return caught.value.faults


def stop_spec_with_node(node: object) -> dict[str, Any]:
    """``a`` branches to ``done`` or to ``stop`` (the node under test)."""
    return spec_with(
        {
            "a": {
                "handler": QUOTE,
                "branch": {"guard": IS_CHEAP, "cases": {"true": "done", "false": "stop"}},
            },
            "stop": node,
        }
    )


def stop_spec(status: object) -> dict[str, Any]:
    return stop_spec_with_node({"end": status})


def two_branch_parallel(join: dict[str, Any]) -> dict[str, Any]:
    return spec_with(
        {
            "a": {"parallel": ["b", "c"], "join": join, "next": "done"},
            "b": {"handler": SEND_EMAIL},
            "c": {"handler": SEND_SMS},
        }
    )


def book_flight_builder() -> Workflow:
    return (
        Workflow(
            "book_flight",
            version=1,
            description="Search, quote, approve if expensive, reserve, notify, triage follow-ups.",
            input=BOOK_FLIGHT_INPUT,
        )
        .task("search", flights.search, next="price_check")
        .task(
            "price_check",
            flights.quote,
            branch={"guard": flights.is_cheap, "cases": {True: "reserve", False: "approval"}},
        )
        .wait(
            "approval",
            signals={"approve": "reserve", "reject": "rejected"},
            timeout="24h",
            on_timeout="escalate",
        )
        .task("escalate", flights.page_manager, next="approval", max_visits=2)
        .task(
            "reserve",
            flights.reserve,
            next="notify",
            retry={"attempts": 5, "backoff": "0.5s", "max_delay": "30s"},
            compensate=flights.release_seat,
            on_error={"permanent": "rejected"},
        )
        .parallel(
            "notify",
            ["email", "sms"],
            join={"policy": "quorum", "k": 1, "timeout": "5m"},
            next="triage",
        )
        .task("email", flights.send_email)
        .task("sms", flights.send_sms)
        .task(
            "triage",
            flights.classify,
            route={
                "key": "intent",
                "table": {"refund": "refund", "change": "done"},
                "default": "done",
            },
        )
        .task("refund", flights.refund, next="done", max_visits=3)
        .end("done")
        .end("rejected", "failed")
    )


@pytest.fixture(scope="module")
def book_flight() -> WorkflowDefinition:
    return load_file(BOOK_FLIGHT)


# -- the example loads with the right model ------------------------------------------------


def test_example_yaml_loads_with_workflow_fields(book_flight: WorkflowDefinition) -> None:
    assert book_flight.name == "book_flight"
    assert book_flight.version == 1
    assert book_flight.key == "book_flight@1"
    assert book_flight.start == "search"
    assert book_flight.description.startswith("Search, quote")
    assert book_flight.max_visits is None
    assert book_flight.extra == {}
    assert list(book_flight.nodes) == [
        "search",
        "price_check",
        "approval",
        "escalate",
        "reserve",
        "notify",
        "email",
        "sms",
        "triage",
        "refund",
        "done",
        "rejected",
    ]


def test_example_node_kinds(book_flight: WorkflowDefinition) -> None:
    kinds = {node_id: type(node) for node_id, node in book_flight.nodes.items()}
    assert kinds == {
        "search": TaskNode,
        "price_check": TaskNode,
        "approval": WaitNode,
        "escalate": TaskNode,
        "reserve": TaskNode,
        "notify": ParallelNode,
        "email": TaskNode,
        "sms": TaskNode,
        "triage": TaskNode,
        "refund": TaskNode,
        "done": EndNode,
        "rejected": EndNode,
    }


def test_example_task_handlers_are_resolved(book_flight: WorkflowDefinition) -> None:
    search = book_flight.node("search")
    assert isinstance(search, TaskNode)
    assert search.handler is not None
    assert search.handler.path == SEARCH
    assert search.handler.target is flights.search
    assert search.next == "price_check"
    assert search.branch is None
    assert search.route is None


def test_example_branch(book_flight: WorkflowDefinition) -> None:
    node = book_flight.node("price_check")
    assert isinstance(node, TaskNode)
    assert node.next is None
    assert node.branch is not None
    assert node.branch.guard.path == IS_CHEAP
    assert node.branch.guard.target is flights.is_cheap
    assert dict(node.branch.cases) == {"true": "reserve", "false": "approval"}


def test_example_wait_duration_is_24_hours(book_flight: WorkflowDefinition) -> None:
    node = book_flight.node("approval")
    assert isinstance(node, WaitNode)
    assert dict(node.signals) == {"approve": "reserve", "reject": "rejected"}
    assert node.timeout == timedelta(hours=24)
    assert node.on_timeout == "escalate"


def test_example_max_visits(book_flight: WorkflowDefinition) -> None:
    assert book_flight.node("escalate").max_visits == 2
    assert book_flight.node("refund").max_visits == 3
    assert book_flight.node("search").max_visits is None
    assert book_flight.visit_limit("escalate") == 2
    assert book_flight.visit_limit("search") is None


def test_example_retry_compensation_and_on_error(book_flight: WorkflowDefinition) -> None:
    node = book_flight.node("reserve")
    assert isinstance(node, TaskNode)
    assert node.next == "notify"
    assert node.retry.attempts == 5
    assert node.retry.backoff == timedelta(seconds=0.5)
    assert node.retry.max_delay == timedelta(seconds=30)
    assert node.compensate is not None
    assert node.compensate.path == "examples.flights:release_seat"
    assert node.compensate.target is flights.release_seat
    assert dict(node.on_error) == {ErrorClass.PERMANENT: "rejected"}


def test_example_nodes_without_retry_get_the_default_policy(
    book_flight: WorkflowDefinition,
) -> None:
    assert book_flight.node("search").retry == DEFAULT_RETRY
    assert book_flight.node("search").timeout == DEFAULT_NODE_TIMEOUT
    assert dict(book_flight.node("search").on_error) == {}
    assert book_flight.node("search").compensate is None


def test_example_parallel_quorum(book_flight: WorkflowDefinition) -> None:
    node = book_flight.node("notify")
    assert isinstance(node, ParallelNode)
    assert node.branches == ("email", "sms")
    assert node.join.policy is JoinPolicyKind.QUORUM
    assert node.join.k == 1
    assert node.join.timeout == timedelta(minutes=5)
    assert node.next == "triage"
    assert dict(book_flight.branch_parents) == {"email": "notify", "sms": "notify"}
    email = book_flight.node("email")
    assert isinstance(email, TaskNode)
    assert (email.next, email.branch, email.route) == (None, None, None)


def test_example_route_default(book_flight: WorkflowDefinition) -> None:
    node = book_flight.node("triage")
    assert isinstance(node, TaskNode)
    assert node.route is not None
    assert node.route.key == "intent"
    assert dict(node.route.table) == {"refund": "refund", "change": "done"}
    assert node.route.default == "done"


def test_example_end_statuses(book_flight: WorkflowDefinition) -> None:
    done = book_flight.node("done")
    rejected = book_flight.node("rejected")
    assert isinstance(done, EndNode)
    assert isinstance(rejected, EndNode)
    assert done.status is RunStatus.SUCCEEDED
    assert rejected.status is RunStatus.FAILED


# -- one model, three forms ----------------------------------------------------------------


def test_builder_compiles_to_the_same_model_as_the_yaml(book_flight: WorkflowDefinition) -> None:
    built = book_flight_builder().build()
    assert built == book_flight
    assert book_flight == built


def test_equality_is_not_vacuous(book_flight: WorkflowDefinition) -> None:
    changed = book_flight_builder().task("spare", flights.refund, next="done")
    changed.nodes["search"]["next"] = "spare"
    changed.nodes["spare"]["next"] = "price_check"
    assert changed.build() != book_flight


def test_builder_to_spec_is_the_file_form(book_flight: WorkflowDefinition) -> None:
    wf = book_flight_builder()
    spec = wf.to_spec()
    assert spec["nodes"]["search"] == {"handler": SEARCH, "next": "price_check"}
    assert spec["nodes"]["price_check"]["branch"]["cases"] == {
        "true": "reserve",
        "false": "approval",
    }
    assert load_definition(spec) == book_flight
    assert load_definition(json.loads(json.dumps(spec))) == book_flight


def test_json_file_loads_equal_to_yaml(tmp_path: Path, book_flight: WorkflowDefinition) -> None:
    spec = yaml.safe_load(BOOK_FLIGHT.read_text(encoding="utf-8"))
    path = tmp_path / "book_flight.json"
    path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    assert load_file(path) == book_flight


def test_yml_suffix_loads_equal_to_yaml(tmp_path: Path, book_flight: WorkflowDefinition) -> None:
    path = tmp_path / "book_flight.yml"
    path.write_text(BOOK_FLIGHT.read_text(encoding="utf-8"), encoding="utf-8")
    assert load_file(path) == book_flight


# -- unknown_target ------------------------------------------------------------------------


def test_unknown_next_target() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {
                    "handler": QUOTE,
                    "branch": {"guard": IS_CHEAP, "cases": {"true": "done", "false": "b"}},
                },
                "b": {"handler": SEARCH, "next": "nowhere"},
            }
        )
    )
    assert ("unknown_target", "b") in pairs(faults)
    # b leads nowhere, so it cannot reach an end either
    assert pairs(faults) == {("unknown_target", "b"), ("no_path_to_end", "b")}
    (unknown,) = [f for f in faults if f.code == "unknown_target"]
    assert "nowhere" in unknown.message


def test_unknown_on_error_target_is_the_only_fault() -> None:
    faults = faults_of(
        spec_with({"a": {"handler": SEARCH, "next": "done", "on_error": {"business": "nowhere"}}})
    )
    assert pairs(faults) == {("unknown_target", "a")}
    assert "failed:business" in faults[0].message


def test_unknown_route_default_target() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {
                    "handler": SEARCH,
                    "route": {"key": "k", "table": {"x": "done"}, "default": "nowhere"},
                }
            }
        )
    )
    assert pairs(faults) == {("unknown_target", "a")}


def test_unknown_start_is_a_workflow_fault() -> None:
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done"}}, start="zz"))
    assert ("unknown_target", None) in pairs(faults)
    assert {f.code for f in faults} == {"unknown_target", "unreachable"}


# -- unresolved_import ---------------------------------------------------------------------


def test_handler_in_missing_module() -> None:
    faults = faults_of(spec_with({"a": {"handler": "no_such_module_xyz:run", "next": "done"}}))
    assert pairs(faults) == {("unresolved_import", "a")}
    assert "no_such_module_xyz" in faults[0].message


def test_handler_missing_attribute() -> None:
    faults = faults_of(spec_with({"a": {"handler": "examples.flights:nope", "next": "done"}}))
    assert pairs(faults) == {("unresolved_import", "a")}


def test_guard_missing_attribute() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {
                    "handler": SEARCH,
                    "branch": {"guard": "examples.flights:nope", "cases": {"true": "done"}},
                }
            }
        )
    )
    assert pairs(faults) == {("unresolved_import", "a")}
    assert "guard" in faults[0].message


def test_guard_in_missing_module() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {
                    "handler": SEARCH,
                    "branch": {"guard": "no_such_module_xyz:g", "cases": {"true": "done"}},
                }
            }
        )
    )
    assert pairs(faults) == {("unresolved_import", "a")}


def test_compensation_missing_attribute() -> None:
    faults = faults_of(
        spec_with({"a": {"handler": SEARCH, "next": "done", "compensate": "examples.flights:x"}})
    )
    assert pairs(faults) == {("unresolved_import", "a")}


@pytest.mark.parametrize(
    "handler",
    ["examples.flights:APPROVAL_THRESHOLD_EUR", "examples.flights", ":search", "examples.flights:"],
)
def test_handler_not_a_callable_import_path(handler: str) -> None:
    faults = faults_of(spec_with({"a": {"handler": handler, "next": "done"}}))
    assert pairs(faults) == {("unresolved_import", "a")}


def test_resolve_false_does_not_import() -> None:
    definition = load_definition(
        spec_with({"a": {"handler": "no_such_module_xyz:run", "next": "done"}}), resolve=False
    )
    node = definition.node("a")
    assert isinstance(node, TaskNode)
    handler = node.handler
    assert handler is not None
    assert handler.path == "no_such_module_xyz:run"
    assert handler.target is None


def test_builder_lambda_handler() -> None:
    faults = build_faults(Workflow("w").task("a", lambda ctx, state: {}, next="done").end("done"))
    assert pairs(faults) == {("unresolved_import", "a")}
    assert "<lambda>" in faults[0].message


def test_builder_lambda_guard() -> None:
    wf = (
        Workflow("w")
        .task("a", flights.search, branch={"guard": lambda state: True, "cases": {True: "done"}})
        .end("done")
    )
    assert pairs(build_faults(wf)) == {("unresolved_import", "a")}


def test_builder_nested_function_handler() -> None:
    def local_handler(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
        return {}

    faults = build_faults(Workflow("w").task("a", local_handler, next="done").end("done"))
    assert pairs(faults) == {("unresolved_import", "a")}


def test_builder_lambda_is_refused_even_without_resolve() -> None:
    wf = Workflow("w").task("a", lambda ctx, state: {}, next="done").end("done")
    with pytest.raises(WorkflowDefinitionError) as caught:
        wf.build(resolve=False)
    assert pairs(caught.value.faults) == {("unresolved_import", "a")}


def test_builder_module_level_function_resolves() -> None:
    definition = Workflow("w").task("a", flights.search, next="done").end("done").build()
    node = definition.node("a")
    assert isinstance(node, TaskNode)
    handler = node.handler
    assert handler is not None
    assert handler.path == SEARCH
    assert handler.target is flights.search


# -- unreachable / no_path_to_end ------------------------------------------------------------


def test_unreachable_node() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {"handler": SEARCH, "next": "done"},
                "island": {"handler": SEARCH, "next": "done"},
            }
        )
    )
    assert pairs(faults) == {("unreachable", "island")}


def test_unreachable_end_node() -> None:
    spec = spec_with({"a": {"handler": SEARCH, "next": "done"}})
    spec["nodes"]["never"] = {"end": "failed"}
    assert pairs(faults_of(spec)) == {("unreachable", "never")}


def test_handler_without_edges_that_is_not_a_branch_is_a_dead_end() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {
                    "handler": QUOTE,
                    "branch": {"guard": IS_CHEAP, "cases": {"true": "done", "false": "b"}},
                },
                "b": {"handler": SEARCH},
            }
        )
    )
    assert pairs(faults) == {("no_path_to_end", "b")}
    assert "dead end" in faults[0].message


def test_bounded_loop_with_no_exit_has_no_path_to_end() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {
                    "handler": QUOTE,
                    "branch": {"guard": IS_CHEAP, "cases": {"true": "done", "false": "b"}},
                },
                "b": {"handler": SEARCH, "next": "c", "max_visits": 3},
                "c": {"handler": SEARCH, "next": "b"},
            }
        )
    )
    assert pairs(faults) == {("no_path_to_end", "b"), ("no_path_to_end", "c")}


def test_workflow_without_end_node() -> None:
    spec = {
        "name": "w",
        "version": 1,
        "start": "a",
        "nodes": {"a": {"handler": SEARCH, "next": "b"}, "b": {"handler": SEARCH}},
    }
    faults = faults_of(spec)
    assert ("no_end", None) in pairs(faults)
    assert ("no_path_to_end", "a") in pairs(faults)
    assert ("no_path_to_end", "b") in pairs(faults)


# -- wait_without_timeout --------------------------------------------------------------------


def test_wait_without_timeout() -> None:
    faults = faults_of(
        spec_with({"a": {"wait": {"signals": {"ok": "done"}, "on_timeout": "done"}}})
    )
    assert pairs(faults) == {("wait_without_timeout", "a")}
    assert "missing timeout" in faults[0].message


def test_wait_without_on_timeout() -> None:
    faults = faults_of(spec_with({"a": {"wait": {"signals": {"ok": "done"}, "timeout": "1h"}}}))
    assert pairs(faults) == {("wait_without_timeout", "a")}
    assert "missing on_timeout" in faults[0].message


def test_wait_without_either() -> None:
    faults = faults_of(spec_with({"a": {"wait": {"signals": {"ok": "done"}}}}))
    assert pairs(faults) == {("wait_without_timeout", "a")}
    assert "timeout and on_timeout" in faults[0].message


def test_wait_with_node_level_timeout_is_valid() -> None:
    definition = load_definition(
        spec_with(
            {"a": {"wait": {"signals": {"ok": "done"}, "on_timeout": "done"}, "timeout": "2h"}}
        )
    )
    node = definition.node("a")
    assert isinstance(node, WaitNode)
    assert node.timeout == timedelta(hours=2)
    assert node.on_timeout == "done"


# -- join_unknown_branch / join_non_branch ---------------------------------------------------


def test_join_over_unknown_branch() -> None:
    faults = faults_of(
        spec_with({"a": {"parallel": ["b", "ghost"], "next": "done"}, "b": {"handler": SEND_EMAIL}})
    )
    assert ("join_unknown_branch", "a") in pairs(faults)
    # the fan-out edge into the missing node is also an unknown target; nothing else
    assert pairs(faults) == {("join_unknown_branch", "a"), ("unknown_target", "a")}


def test_critical_branch_not_among_the_branches() -> None:
    faults = faults_of(two_branch_parallel({"policy": "critical", "critical": ["ghost"]}))
    assert pairs(faults) == {("join_unknown_branch", "a")}


def test_branch_with_its_own_next_is_not_a_branch() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {"parallel": ["b", "c"], "next": "done"},
                "b": {"handler": SEND_EMAIL, "next": "done"},
                "c": {"handler": SEND_SMS},
            }
        )
    )
    assert pairs(faults) == {("join_non_branch", "a")}
    assert "'b'" in faults[0].message


def test_branch_targeted_by_another_edge() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {
                    "handler": QUOTE,
                    "branch": {"guard": IS_CHEAP, "cases": {"true": "p", "false": "b"}},
                },
                "p": {"parallel": ["b", "c"], "next": "done"},
                "b": {"handler": SEND_EMAIL},
                "c": {"handler": SEND_SMS},
            }
        )
    )
    assert pairs(faults) == {("join_non_branch", "a")}


def test_branch_shared_by_two_parallel_nodes() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {"parallel": ["b", "c"], "next": "p2"},
                "p2": {"parallel": ["b", "c"], "next": "done"},
                "b": {"handler": SEND_EMAIL},
                "c": {"handler": SEND_SMS},
            }
        )
    )
    assert pairs(faults) == {("join_non_branch", "p2")}


def test_wait_node_as_a_branch() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {"parallel": ["b", "c"], "next": "done"},
                "b": {"wait": {"signals": {"x": "done"}, "timeout": "1h", "on_timeout": "done"}},
                "c": {"handler": SEND_SMS},
            }
        )
    )
    assert pairs(faults) == {("join_non_branch", "a")}


def test_branch_as_start() -> None:
    spec = spec_with({"b": {"handler": SEND_EMAIL}, "a": {"parallel": ["b"], "next": "done"}})
    spec["start"] = "b"
    faults = faults_of(spec)
    assert ("join_non_branch", "b") in pairs(faults)


# -- quorum_out_of_range ---------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, -1, 3, "1", 1.5, True, None])
def test_quorum_out_of_range(k: object) -> None:
    faults = faults_of(two_branch_parallel({"policy": "quorum", "k": k}))
    assert pairs(faults) == {("quorum_out_of_range", "a")}


@pytest.mark.parametrize("k", [1, 2])
def test_quorum_in_range(k: int) -> None:
    node = load_definition(two_branch_parallel({"policy": "quorum", "k": k})).node("a")
    assert isinstance(node, ParallelNode)
    assert node.join.k == k


def test_k_without_quorum_policy_is_a_bad_value() -> None:
    faults = faults_of(two_branch_parallel({"policy": "all", "k": 1}))
    assert pairs(faults) == {("bad_value", "a")}


# -- route_without_default -------------------------------------------------------------------


def test_route_without_default() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {
                    "handler": QUOTE,
                    "branch": {"guard": IS_CHEAP, "cases": {"true": "done", "false": "r"}},
                },
                "r": {"handler": SEARCH, "route": {"key": "k", "table": {"x": "done"}}},
            }
        )
    )
    assert ("route_without_default", "r") in pairs(faults)
    # without a valid route the node has no edges left: a dead end as well
    assert pairs(faults) == {("route_without_default", "r"), ("no_path_to_end", "r")}


# -- duplicate_name --------------------------------------------------------------------------

DUPLICATE_NODE_YAML = """\
name: w
version: 1
start: a
nodes:
  a:    {handler: "examples.flights:search", next: done}
  done: {end: succeeded}
  done: {end: failed}
"""


def test_duplicate_node_key_in_yaml() -> None:
    parsed = parse_text(DUPLICATE_NODE_YAML, ".yaml")
    faults = faults_of(parsed)
    assert pairs(faults) == {("duplicate_name", "done")}


def test_duplicate_key_inside_a_node_names_the_node() -> None:
    text = DUPLICATE_NODE_YAML.replace("next: done}", "next: done, next: done}")
    text = text.replace("  done: {end: failed}\n", "")
    assert pairs(faults_of(parse_text(text, ".yaml"))) == {("duplicate_name", "a")}


def test_duplicate_top_level_key_is_a_workflow_fault() -> None:
    text = DUPLICATE_NODE_YAML.replace("  done: {end: failed}\n", "") + "version: 1\n"
    assert pairs(faults_of(parse_text(text, ".yaml"))) == {("duplicate_name", None)}


def test_duplicate_keys_in_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(DUPLICATE_NODE_YAML, encoding="utf-8")
    with pytest.raises(WorkflowDefinitionError) as caught:
        load_file(path)
    assert pairs(caught.value.faults) == {("duplicate_name", "done")}
    assert caught.value.source == str(path)


DUPLICATE_NODE_JSON = (
    '{"name": "w", "version": 1, "start": "a", "nodes": {'
    '"a": {"handler": "examples.flights:search", "next": "done"}, '
    '"done": {"end": "succeeded"}, "done": {"end": "failed"}}}'
)


def test_duplicate_node_key_in_json() -> None:
    assert json.loads(DUPLICATE_NODE_JSON)["nodes"]["done"] == {"end": "failed"}  # JSON drops it
    faults = faults_of(parse_text(DUPLICATE_NODE_JSON, ".json"))
    assert pairs(faults) == {("duplicate_name", "done")}


def test_duplicate_node_key_in_json_file(tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    path.write_text(DUPLICATE_NODE_JSON, encoding="utf-8")
    with pytest.raises(WorkflowDefinitionError) as caught:
        load_file(path)
    assert pairs(caught.value.faults) == {("duplicate_name", "done")}


def test_duplicate_node_key_in_tab_indented_json() -> None:
    # Tab indentation is ordinary JSON (json.dumps(..., indent="\t"), many editors).
    text = (
        '{\n\t"name": "w",\n\t"version": 1,\n\t"start": "a",\n\t"nodes": {\n'
        '\t\t"a": {"handler": "examples.flights:search", "next": "done"},\n'
        '\t\t"done": {"end": "succeeded"},\n'
        '\t\t"done": {"end": "failed"}\n\t}\n}\n'
    )
    assert json.loads(text)["nodes"]["done"] == {"end": "failed"}
    faults = faults_of(parse_text(text, ".json"))
    assert pairs(faults) == {("duplicate_name", "done")}


def test_builder_adding_the_same_node_twice() -> None:
    wf = (
        Workflow("w")
        .task("a", flights.search, next="done")
        .task("a", flights.quote, next="done")
        .end("done")
    )
    assert pairs(build_faults(wf)) == {("duplicate_name", "a")}


def test_parallel_branch_listed_twice() -> None:
    spec = spec_with({"a": {"parallel": ["b", "b"], "next": "done"}, "b": {"handler": SEND_EMAIL}})
    assert pairs(faults_of(spec)) == {("duplicate_name", "a")}


def test_text_that_does_not_parse_is_a_syntax_fault() -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        parse_text('{"name": ', ".json")
    assert caught.value.codes == ["syntax"]
    with pytest.raises(WorkflowDefinitionError) as caught:
        parse_text("nodes: [unclosed", ".yaml")
    assert caught.value.codes == ["syntax"]


# -- unbounded_cycle -------------------------------------------------------------------------


def loop_spec(*, a_visits: int | None = None, **top: Any) -> dict[str, Any]:
    a: dict[str, Any] = {"handler": SEARCH, "next": "b"}
    if a_visits is not None:
        a["max_visits"] = a_visits
    return spec_with(
        {
            "a": a,
            "b": {
                "handler": QUOTE,
                "branch": {"guard": IS_CHEAP, "cases": {"true": "done", "false": "a"}},
            },
        },
        **top,
    )


def test_loop_without_max_visits_is_unbounded() -> None:
    faults = faults_of(loop_spec())
    assert {f.code for f in faults} == {"unbounded_cycle"}
    assert len(faults) == 1
    assert faults[0].node in {"a", "b"}
    assert "a" in faults[0].message
    assert "b" in faults[0].message


def test_self_loop_without_max_visits_is_unbounded() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {
                    "handler": QUOTE,
                    "branch": {"guard": IS_CHEAP, "cases": {"true": "done", "false": "a"}},
                }
            }
        )
    )
    assert pairs(faults) == {("unbounded_cycle", "a")}


def test_max_visits_on_one_node_bounds_the_loop() -> None:
    definition = load_definition(loop_spec(a_visits=3))
    assert definition.visit_limit("a") == 3
    assert definition.visit_limit("b") is None


def test_workflow_wide_max_visits_bounds_the_loop() -> None:
    definition = load_definition(loop_spec(max_visits=5))
    assert definition.max_visits == 5
    assert definition.visit_limit("a") == 5
    assert definition.visit_limit("b") == 5


def test_loop_through_an_error_edge_is_unbounded() -> None:
    faults = faults_of(
        spec_with({"a": {"handler": SEARCH, "next": "done", "on_error": {"transient": "a"}}})
    )
    assert pairs(faults) == {("unbounded_cycle", "a")}


def test_inner_loop_that_skips_the_bounded_node_is_unbounded() -> None:
    # a <-> b is bounded by a, but b -> c -> b never passes a: that loop can run forever.
    spec = spec_with(
        {
            "a": {
                "handler": QUOTE,
                "max_visits": 2,
                "branch": {"guard": IS_CHEAP, "cases": {"true": "b", "false": "done"}},
            },
            "b": {
                "handler": QUOTE,
                "branch": {"guard": IS_CHEAP, "cases": {"true": "a", "false": "c"}},
            },
            "c": {"handler": SEARCH, "next": "b"},
        }
    )
    faults = faults_of(spec)
    assert {f.code for f in faults} == {"unbounded_cycle"}
    assert {f.node for f in faults} <= {"b", "c"}


# -- bad_duration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["24 hours", "-5s", 0, "abc", True, "", -1, "30", "5x", float("inf"), [1]]
)
def test_bad_duration(value: object) -> None:
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done", "timeout": value}}))
    assert pairs(faults) == {("bad_duration", "a")}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("24h", timedelta(hours=24)),
        ("0.5s", timedelta(milliseconds=500)),
        ("250ms", timedelta(milliseconds=250)),
        ("1h30m", timedelta(minutes=90)),
        ("2d", timedelta(days=2)),
        (45, timedelta(seconds=45)),
        (1.5, timedelta(seconds=1.5)),
    ],
)
def test_good_duration(value: object, expected: timedelta) -> None:
    definition = load_definition(
        spec_with({"a": {"handler": SEARCH, "next": "done", "timeout": value}})
    )
    assert definition.node("a").timeout == expected


def test_bad_durations_in_retry_join_and_wait() -> None:
    faults = faults_of(
        spec_with(
            {
                "a": {"handler": SEARCH, "next": "p", "retry": {"attempts": 2, "backoff": "-5s"}},
                "p": {
                    "parallel": ["b", "c"],
                    "join": {"policy": "all", "timeout": "abc"},
                    "next": "w",
                },
                "b": {"handler": SEND_EMAIL},
                "c": {"handler": SEND_SMS},
                "w": {"wait": {"signals": {"ok": "done"}, "timeout": 0, "on_timeout": "done"}},
            }
        )
    )
    assert ("bad_duration", "a") in pairs(faults)
    assert ("bad_duration", "p") in pairs(faults)
    assert ("bad_duration", "w") in pairs(faults)
    # a wait whose only timeout is unusable also has no timeout
    assert pairs(faults) == {
        ("bad_duration", "a"),
        ("bad_duration", "p"),
        ("bad_duration", "w"),
        ("wait_without_timeout", "w"),
    }


def test_bad_workflow_cancel_timeout() -> None:
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done"}}, cancel_timeout="soon"))
    assert pairs(faults) == {("bad_duration", None)}


# -- node shape faults -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "node",
    [
        {"handler": SEARCH, "next": "done", "end": "succeeded"},
        {"parallel": ["x"], "handler": SEARCH, "next": "done"},
        {
            "wait": {"signals": {"x": "done"}, "timeout": "1h", "on_timeout": "done"},
            "end": "failed",
        },
    ],
)
def test_ambiguous_node(node: dict[str, Any]) -> None:
    faults = faults_of(stop_spec_with_node(node))
    # the node is dropped, so the edge into it leads to an unknown target
    assert pairs(faults) == {("ambiguous_node", "stop"), ("unknown_target", "a")}


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            {"end": "succeeded", "next": "done"},
            "key 'next' does not apply here (it is for task nodes and parallel nodes)",
        ),
        (
            {
                "wait": {"signals": {"x": "done"}, "timeout": "1h", "on_timeout": "done"},
                "next": "d",
            },
            "key 'next' does not apply here (it is for task nodes and parallel nodes)",
        ),
        (
            {"handler": SEARCH, "next": "done", "join": {"policy": "all"}},
            "key 'join' does not apply here (it is for parallel nodes)",
        ),
    ],
)
def test_a_key_of_another_kind_of_node_is_named(node: dict[str, Any], message: str) -> None:
    faults = faults_of(stop_spec_with_node(node))
    assert [(f.code, f.node, f.message) for f in faults] == [("unknown_key", "stop", message)]


@pytest.mark.parametrize(
    "node", [{}, {"retry": {"attempts": 2}}, {"max_visits": 3}, {"next": "done"}]
)
def test_a_node_whose_kind_cannot_be_told_is_a_fault(node: dict[str, Any]) -> None:
    """Nothing to run and nothing to decide: a bare ``next`` is not a pass-through."""
    faults = faults_of(stop_spec_with_node(node))
    assert pairs(faults) == {("empty_node", "stop"), ("unknown_target", "a")}


def test_node_that_is_not_a_mapping() -> None:
    faults = faults_of(stop_spec_with_node("oops"))
    assert pairs(faults) == {("not_a_mapping", "stop"), ("unknown_target", "a")}


@pytest.mark.parametrize(
    "edges",
    [
        {"next": "done", "branch": {"guard": IS_CHEAP, "cases": {"true": "done"}}},
        {"next": "done", "route": {"key": "k", "table": {"x": "done"}, "default": "done"}},
        {
            "branch": {"guard": IS_CHEAP, "cases": {"true": "done"}},
            "route": {"key": "k", "table": {"x": "done"}, "default": "done"},
        },
    ],
)
def test_conflicting_edges(edges: dict[str, Any]) -> None:
    faults = faults_of(spec_with({"a": {"handler": SEARCH, **edges}}))
    assert pairs(faults) == {("conflicting_edges", "a")}


@pytest.mark.parametrize("status", ["exploded", "running", "", None, 1])
def test_bad_end_status(status: object) -> None:
    faults = faults_of(stop_spec(status))
    assert pairs(faults) == {("bad_value", "stop")}
    assert "'end' must be one of" in faults[0].message


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
def test_good_end_status(status: str) -> None:
    node = load_definition(stop_spec(status)).node("stop")
    assert isinstance(node, EndNode)
    assert node.status is RunStatus(status)


# -- workflow-level faults -------------------------------------------------------------------


def test_missing_start() -> None:
    spec = spec_with({"a": {"handler": SEARCH, "next": "done"}})
    del spec["start"]
    faults = faults_of(spec)
    assert ("missing_start", None) in pairs(faults)
    # with no start, no node is reachable
    assert pairs(faults) == {("missing_start", None), ("unreachable", "a"), ("unreachable", "done")}


@pytest.mark.parametrize("start", ["", 1, None])
def test_start_that_is_not_a_name(start: object) -> None:
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done"}}, start=start))
    assert ("missing_start", None) in pairs(faults)


def test_builder_start_defaults_to_the_first_node() -> None:
    definition = Workflow("w").task("a", flights.search, next="done").end("done").build()
    assert definition.start == "a"


@pytest.mark.parametrize("version", [0, -1, "1", True, None, 1.0])
def test_bad_version(version: object) -> None:
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done"}}, version=version))
    assert pairs(faults) == {("bad_version", None)}


@pytest.mark.parametrize("name", [None, "", "has space", "1abc", 7])
def test_bad_workflow_name(name: object) -> None:
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done"}}, name=name))
    assert pairs(faults) == {("bad_name", None)}


def test_not_a_mapping() -> None:
    assert faults_of(["not", "a", "mapping"])[0].code == "not_a_mapping"


def test_no_nodes() -> None:
    codes = {f.code for f in faults_of({"name": "w", "version": 1, "start": "a", "nodes": {}})}
    assert "no_nodes" in codes


# -- every problem at once -------------------------------------------------------------------

EXPECTED_BROKEN_FAULTS = {
    ("unknown_target", "intake"),
    ("unresolved_import", "fetch"),
    ("bad_duration", "pause"),
    ("wait_without_timeout", "hold"),
    ("quorum_out_of_range", "fan"),
    ("join_non_branch", "fan"),
    ("join_unknown_branch", "gather"),
    ("unbounded_cycle", "rework"),
    ("route_without_default", "sorter"),
    ("no_path_to_end", "dead_end"),
    ("unreachable", "orphan"),
    ("duplicate_name", "done"),
}


def test_broken_fixture_reports_every_problem_at_once() -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        load_file(BROKEN)
    error = caught.value
    assert error.source == str(BROKEN)
    found = pairs(error.faults)
    missing = EXPECTED_BROKEN_FAULTS - found
    assert not missing, f"faults not reported: {missing}; got {sorted(found, key=str)}"
    assert {code for code, _ in EXPECTED_BROKEN_FAULTS} <= set(error.codes)
    # the message lists every fault, one per line
    for fault in error.faults:
        assert str(fault) in str(error)
    assert f"{len(error.faults)} problem(s)" in str(error)


def test_error_round_trips_through_json() -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        load_file(BROKEN)
    payload = json.loads(json.dumps(caught.value.to_dict()))
    assert payload["code"] == "invalid_definition"
    assert {(f["code"], f["node"]) for f in payload["faults"]} == pairs(caught.value.faults)


# -- extra keys are kept -------------------------------------------------------------------


def test_extension_keys_and_metadata_are_kept_in_extra() -> None:
    spec = spec_with(
        {
            "a": {"handler": SEARCH, "next": "w", "x-owner": "team-x", "metadata": {"tags": []}},
            "w": {
                "wait": {
                    "signals": {"ok": "done"},
                    "timeout": "1h",
                    "on_timeout": "done",
                    "x-prompt": "Approve?",
                },
                "x-ui": {"color": "red"},
            },
        },
        metadata={"team": "flights"},
        **{"x-owner": "ops"},
    )
    spec["nodes"]["done"] = {"end": "succeeded", "x-note": "happy path"}
    definition = load_definition(spec)
    assert definition.extra == {"metadata": {"team": "flights"}, "x-owner": "ops"}
    assert definition.node("a").extra == {"x-owner": "team-x", "metadata": {"tags": []}}
    assert definition.node("w").extra == {"x-ui": {"color": "red"}, "wait.x-prompt": "Approve?"}
    assert definition.node("done").extra == {"x-note": "happy path"}


def test_metadata_must_be_a_mapping() -> None:
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done", "metadata": "x"}}))
    assert pairs(faults) == {("bad_value", "a")}


def test_extra_keys_take_part_in_equality() -> None:
    plain = load_definition(spec_with({"a": {"handler": SEARCH, "next": "done"}}))
    with_extra = load_definition(
        spec_with({"a": {"handler": SEARCH, "next": "done"}}, **{"x-owner": "x"})
    )
    assert plain != with_extra


# -- strictness: every mapping is closed ------------------------------------------------------

BRANCHES = {"x": {"handler": SEND_EMAIL}, "y": {"handler": SEND_SMS}}
PARALLEL = {"parallel": ["x", "y"], "next": "done"}
WAIT = {"signals": {"ok": "done"}, "timeout": "1h", "on_timeout": "done"}
CASES = {"true": "done", "false": "stop"}


@pytest.mark.parametrize(
    ("nodes", "top", "expected"),
    [
        (
            {"a": {"handler": SEARCH, "next": "done", "retyr": {"attempts": 5}}},
            {},
            ("a", "unknown key 'retyr' (did you mean 'retry'?)"),
        ),
        (
            {"a": {"handler": SEARCH, "next": "done", "timout": "5m"}},
            {},
            ("a", "unknown key 'timout' (did you mean 'timeout'?)"),
        ),
        (
            {"a": {**PARALLEL, "join": {"polcy": "quorum"}}, **BRANCHES},
            {},
            ("a", "unknown key 'polcy' in 'join' (did you mean 'policy'?)"),
        ),
        (
            {"a": {"handler": SEARCH, "next": "done", "retry": {"atempts": 3}}},
            {},
            ("a", "unknown key 'atempts' in 'retry' (did you mean 'attempts'?)"),
        ),
        (
            {"a": {"wait": {**WAIT, "on_timout": "done"}}},
            {},
            ("a", "unknown key 'on_timout' in 'wait' (did you mean 'on_timeout'?)"),
        ),
        (
            {"a": {"route": {"key": "k", "table": {"x": "done"}, "default": "done", "tabel": {}}}},
            {},
            ("a", "unknown key 'tabel' in 'route' (did you mean 'table'?)"),
        ),
        (
            {"a": {"branch": {"guard": IS_CHEAP, "cases": {"true": "done"}, "case": {}}}},
            {},
            ("a", "unknown key 'case' in 'branch' (did you mean 'cases'?)"),
        ),
        (
            {"a": {"handler": SEARCH, "next": "done", "persist": {"cached": "5m", "keys": []}}},
            {},
            ("a", "unknown key 'keys' in 'persist' (did you mean 'key'?)"),
        ),
        (
            {"a": {"child": {"workflow": "w2", "ouput": ["x"]}, "next": "done"}},
            {},
            ("a", "unknown key 'ouput' in 'child' (did you mean 'output'?)"),
        ),
        (
            {"a": {"handler": SEARCH, "next": "done"}},
            {"on_resume": {"check": IS_CHEAP, "replan": "a", "replna": "a"}, "max_visits": 3},
            (None, "unknown key 'replna' in 'on_resume' (did you mean 'replan'?)"),
        ),
        (
            {"a": {"handler": SEARCH, "next": "done"}},
            {"max_visit": 3},
            (None, "unknown key 'max_visit' (did you mean 'max_visits'?)"),
        ),
        (
            {"a": {"handler": SEARCH, "next": "done"}},
            {"owner": "ops"},
            (None, "unknown key 'owner'"),
        ),
        (
            {
                "a": {"handler": QUOTE, "branch": {"guard": IS_CHEAP, "cases": CASES}},
                "stop": {"end": "failed", "ned": 1},
            },
            {},
            ("stop", "unknown key 'ned' (did you mean 'end'?)"),
        ),
        (
            {"a": {**PARALLEL, "shares": {"x": 1}, "shrae": 1}, **BRANCHES},
            {},
            ("a", "unknown key 'shrae' (did you mean 'shares'?)"),
        ),
    ],
)
def test_a_misspelt_key_at_any_level_is_a_fault_with_a_suggestion(
    nodes: dict[str, Any], top: dict[str, Any], expected: tuple[str | None, str]
) -> None:
    faults = faults_of(spec_with(nodes, **top))
    assert [(f.code, f.node, f.message) for f in faults] == [("unknown_key", *expected)]
    assert str(faults[0]).endswith("[unknown_key]")


def test_every_misspelling_is_reported_at_once() -> None:
    nodes = {
        "a": {"handler": SEARCH, "next": "p", "retyr": {"attempts": 5}, "timout": "5m"},
        "p": {**PARALLEL, "join": {"polcy": "quorum"}},
        **BRANCHES,
    }
    faults = faults_of(spec_with(nodes))
    assert [f.code for f in faults] == ["unknown_key"] * 3
    assert {f.node for f in faults} == {"a", "p"}


def test_the_builder_refuses_unknown_keys_too() -> None:
    wf = Workflow("w").task("a", flights.search, next="done", retyr={"attempts": 2}).end("done")
    faults = build_faults(wf)
    assert [(f.code, f.message) for f in faults] == [
        ("unknown_key", "unknown key 'retyr' (did you mean 'retry'?)")
    ]


def test_a_definition_may_declare_the_format_it_was_written_for() -> None:
    from cairn.definitions.format import FORMAT_VERSION  # noqa: PLC0415

    load_definition(spec_with({"a": {"handler": SEARCH, "next": "done"}}, format=FORMAT_VERSION))
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done"}}, format=99))
    assert pairs(faults) == {("unsupported_format", None)}
    assert f"reads formats up to {FORMAT_VERSION}" in faults[0].message
    for bad in (0, "1", True):
        faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done"}}, format=bad))
        assert pairs(faults) == {("bad_value", None)}


def test_a_registered_definition_keeps_loading_with_keys_it_does_not_know(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Runs are pinned to what the store holds, which cannot change: a definition
    registered before keys were checked (a stray key, a bare ``next``) still loads from
    the store, with a warning, while the same text is refused as a new definition."""
    spec = spec_with({"a": {"next": "b", "owner": "ops"}, "b": {"handler": SEARCH, "next": "done"}})
    assert ("empty_node", "a") in pairs(faults_of(spec))
    assert ("unknown_key", "a") in pairs(faults_of(spec))
    with caplog.at_level("WARNING", logger="cairn.definitions.loader"):
        definition = load_definition(spec, source="registered workflow w@1", registered=True)
    assert isinstance(definition.node("a"), TaskNode) and definition.node("a").next == "b"
    assert "unknown key 'owner'" in caplog.text


# -- format 2: default retries and timeouts ----------------------------------------------


def defaults_spec(**top: Any) -> dict[str, Any]:
    """One node of each kind that the defaults must tell apart (a fresh copy each time:
    tests change its nodes)."""
    return copy.deepcopy(
        spec_with(
            {
                "a": {"handler": SEARCH, "next": "pay"},
                "pay": {"handler": QUOTE, "irreversible": True, "next": "trip"},
                "trip": {"child": "flights", "next": "pick"},
                "pick": {"branch": {"guard": IS_CHEAP, "cases": CASES}},
                "stop": {"wait": {"signals": {"go": "fan"}, "timeout": "1d", "on_timeout": "done"}},
                "fan": PARALLEL,
                **BRANCHES,
            },
            **top,
        )
    )


def test_a_task_running_a_handler_gets_the_default_retry_and_timeout() -> None:
    definition = load_definition(defaults_spec())
    assert DEFAULT_RETRY.attempts == 3 and DEFAULT_RETRY.max_delay == timedelta(seconds=30)
    assert definition.node_timeout == DEFAULT_NODE_TIMEOUT == timedelta(hours=1)
    for handled in ("a", "x", "y"):  # parallel branches run handlers too
        assert definition.node(handled).retry == DEFAULT_RETRY
        assert definition.node(handled).timeout == timedelta(hours=1)
    # An irreversible effect is never sent again by a default; it is still bounded.
    assert definition.node("pay").retry == NO_RETRY
    assert definition.node("pay").timeout == timedelta(hours=1)
    # A child run may wait for a person for days; a decision, a wait or a fan-out runs
    # no handler of its own.
    for other in ("trip", "pick", "fan"):
        assert definition.node(other).retry == NO_RETRY
        assert definition.node(other).timeout is None
    assert definition.node("stop").retry == NO_RETRY
    assert definition.node("stop").timeout == timedelta(days=1)


def test_a_node_opts_out_of_the_defaults_or_gives_its_own() -> None:
    spec = defaults_spec()
    spec["nodes"]["a"].update(retry="none", timeout="none")
    spec["nodes"]["x"].update(retry={"attempts": 5}, timeout="5m")
    spec["nodes"]["pay"].update(retry={"attempts": 2})  # said explicitly: it retries
    definition = load_definition(spec)
    assert definition.node("a").retry == NO_RETRY and definition.node("a").timeout is None
    assert definition.node("x").retry.attempts == 5
    assert definition.node("x").timeout == timedelta(minutes=5)
    assert definition.node("pay").retry.attempts == 2
    assert definition.node("y").retry == DEFAULT_RETRY  # the others keep the defaults


def test_the_workflow_sets_or_removes_the_default_node_timeout() -> None:
    spec = defaults_spec(node_timeout="2h")
    spec["nodes"]["x"]["timeout"] = "5m"
    definition = load_definition(spec)
    assert definition.node_timeout == timedelta(hours=2)
    assert definition.node("a").timeout == definition.node("pay").timeout == timedelta(hours=2)
    assert definition.node("x").timeout == timedelta(minutes=5)  # its own wins
    assert definition.node("trip").timeout is None  # still no default for a child run
    definition = load_definition(defaults_spec(node_timeout="none"))
    assert definition.node_timeout is None
    assert all(node.timeout is None for node in definition.nodes.values() if node.id != "stop")
    assert definition.node("a").retry == DEFAULT_RETRY  # the retry default stays
    faults = faults_of(defaults_spec(node_timeout="soon"))
    assert pairs(faults) == {("bad_duration", None)} and "node_timeout" in faults[0].message


def test_the_builder_takes_the_same_defaults_and_opt_outs() -> None:
    wf = Workflow("w", node_timeout="10m")
    wf.task("a", flights.search, next="b", retry="none").task("b", flights.quote, next="done")
    definition = wf.end("done").build()
    assert definition.node("a").retry == NO_RETRY
    assert definition.node("a").timeout == timedelta(minutes=10)
    assert definition.node("b").retry == DEFAULT_RETRY


def test_retry_is_a_policy_or_none() -> None:
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done", "retry": "never"}}))
    assert [(f.code, f.node) for f in faults] == [("bad_value", "a")]
    assert "or 'none'" in faults[0].message
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done", "timeout": "never"}}))
    assert pairs(faults) == {("bad_duration", "a")}


def test_format_1_keeps_its_meaning_no_default_retry_or_timeout() -> None:
    """A file that declares format 1 was written when a node without ``retry`` failed on
    its first transient error and one without ``timeout`` could run forever."""
    definition = load_definition(defaults_spec(format=1))
    assert definition.node_timeout is None
    for node in definition.nodes.values():
        assert node.retry == NO_RETRY
        assert node.timeout is None or node.id == "stop"
    explicit = spec_with(
        {"a": {"handler": SEARCH, "next": "done", "retry": {"attempts": 4}, "timeout": "5m"}},
        format=1,
    )
    definition = load_definition(explicit)
    assert definition.node("a").retry.attempts == 4
    assert definition.node("a").timeout == timedelta(minutes=5)


@pytest.mark.parametrize(
    ("node", "top", "expected"),
    [
        (
            {"stall_after": "10m"},
            {},
            (
                "a",
                "key 'stall_after' came in definition format 2; this definition declares format 1",
            ),
        ),
        (
            {},
            {"node_timeout": "2h"},
            (
                None,
                "key 'node_timeout' came in definition format 2; this definition declares format 1",
            ),
        ),
        (
            {"retry": "none"},
            {},
            (
                "a",
                "'retry: none' came in definition format 2; this definition declares format "
                "1, which has no default to opt out of",
            ),
        ),
        (
            {"timeout": "none"},
            {},
            (
                "a",
                "'timeout: none' came in definition format 2; this definition declares "
                "format 1, which has no default to opt out of",
            ),
        ),
    ],
)
def test_format_1_faults_what_came_in_format_2(
    node: dict[str, Any], top: dict[str, Any], expected: tuple[str | None, str]
) -> None:
    spec = spec_with({"a": {"handler": SEARCH, "next": "done", **node}}, format=1, **top)
    faults = faults_of(spec)
    assert [(f.code, f.node, f.message) for f in faults] == [("newer_key", *expected)]
    load_definition(spec_with({"a": {"handler": SEARCH, "next": "done", **node}}, **top))


def test_stall_after_is_parsed_on_tasks_that_run_a_handler() -> None:
    spec = spec_with({"a": {"handler": SEARCH, "next": "done", "stall_after": "10m"}})
    node = load_definition(spec).node("a")
    assert isinstance(node, TaskNode) and node.stall_after == timedelta(minutes=10)
    other = load_definition(spec_with({"a": {"handler": SEARCH, "next": "done"}})).node("a")
    assert isinstance(other, TaskNode) and other.stall_after is None
    faults = faults_of(spec_with({"a": {"handler": SEARCH, "next": "done", "stall_after": 0}}))
    assert pairs(faults) == {("bad_duration", "a")}


def test_stall_after_is_a_fault_where_no_handler_runs() -> None:
    waiting = {"wait": {"signals": {"go": "done"}, "timeout": "1h", "on_timeout": "done"}}
    faults = faults_of(spec_with({"a": {**waiting, "stall_after": "10m"}}))
    assert [(f.code, f.node, f.message) for f in faults] == [
        ("unknown_key", "a", "key 'stall_after' does not apply here (it is for task nodes)")
    ]
    deciding = {
        "branch": {"guard": IS_CHEAP, "cases": {"true": "done", "false": "done"}},
        "stall_after": "10m",
    }
    faults = faults_of(spec_with({"a": deciding}))
    assert [(f.code, f.node) for f in faults] == [("bad_value", "a")]
    assert "needs a handler" in faults[0].message


def test_record_http_is_set_by_the_workflow_and_overridden_by_a_node() -> None:
    spec = spec_with(
        {
            "a": {"handler": SEARCH, "next": "b"},
            "b": {"handler": SEARCH, "next": "done", "record": "none"},
        }
    )
    recorded = load_definition({**spec, "record": "http"})
    assert [recorded.node(n).record_http for n in ("a", "b")] == [True, False]  # type: ignore[union-attr]
    assert load_definition(spec).node("a").record_http is False  # type: ignore[union-attr]
    faults = faults_of({**spec, "record": "everything"})
    assert pairs(faults) == {("bad_value", None)}
    assert "'record' is 'http' or 'none'" in faults[0].message
