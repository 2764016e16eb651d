"""A fork's branches published as fewer messages than branches (cairn.engine.grouping):
which branches a message may carry, how they are spread over the leads, and how the
siblings travel (a header, never the body or the outbox row) and come back as messages
of their own (cairn.workers.step.siblings)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from cairn import Workflow
from cairn.engine.grouping import Grouping, grouped
from cairn.engine.outbox import Outbox
from cairn.errors import UnknownWorkflow
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.messages import (
    MAX_SIBLINGS,
    InvalidMessage,
    NodeMessage,
    Sibling,
    siblings_from_header,
    siblings_header,
)
from cairn.workers.inprocess import InProcessBroker
from cairn.workers.runner import with_siblings
from cairn.workers.step.siblings import Siblings

NOOP = "tests.unit.handlers:noop"
BRANCHES = [f"b{i}" for i in range(1, 11)]


def _fork(**declared: Any) -> WorkflowDefinition:
    """Ten branches; b1 declares ``declared``."""
    wf = Workflow("w", version=1).parallel("fan", BRANCHES, next="done")
    for branch in BRANCHES:
        wf.task(branch, NOOP, **(declared if branch == "b1" else {}))
    return wf.end("done").build(resolve=False)


def _message(node: str, outbox_id: int = 0, **fields: Any) -> NodeMessage:
    number = outbox_id or int(node[1:])
    return replace(NodeMessage("r1", "w", 1, node, 1, 1, outbox_id=number), **fields)


def _grouping(definition: WorkflowDefinition, size: int = 4, **kwargs: Any) -> Grouping:
    def lookup(workflow: str, version: int) -> WorkflowDefinition:
        if (workflow, version) != ("w", 1):
            raise UnknownWorkflow(workflow)
        return definition

    return Grouping(size, lookup, namespace_limits=kwargs.get("namespace_limits", False))


def _carried(published: list[NodeMessage]) -> dict[str, list[str]]:
    return {m.node: [s.node for s in m.siblings] for m in published}


def test_ten_branches_go_as_three_messages_each_lead_carrying_every_third() -> None:
    published = _grouping(_fork())([_message(b) for b in BRANCHES])
    assert _carried(published) == {
        "b1": ["b4", "b7", "b10"],
        "b2": ["b5", "b8"],
        "b3": ["b6", "b9"],
    }
    assert published[0].siblings[0] == Sibling("b4", 1, 4)  # its outbox row rides along


def test_fewer_branches_than_a_group_and_a_size_of_one_go_as_they_are() -> None:
    three = [_message(b) for b in BRANCHES[:3]]
    assert _grouping(_fork())(three) == three
    ten = [_message(b) for b in BRANCHES]
    assert _grouping(_fork(), size=1)(ten) == ten


@pytest.mark.parametrize(
    "declared",
    [
        {"irreversible": True},
        {"concurrency": {"key": "k", "limit": 2}},
        {"rate": {"key": "openai", "requests": "5/s"}},
        {"handler": "tests.unit.handlers:awaiting_noop"},  # imported here: known async
    ],
)
def test_a_branch_that_must_be_its_own_message_is_never_carried(declared: dict[str, Any]) -> None:
    handler = declared.pop("handler", NOOP)
    wf = Workflow("w", version=1).parallel("fan", BRANCHES, next="done")
    for branch in BRANCHES:
        wf.task(branch, handler if branch == "b1" else NOOP, **(declared if branch == "b1" else {}))
    definition = wf.end("done").build()
    published = _grouping(definition)([_message(b) for b in BRANCHES])
    assert _carried(published)["b1"] == []
    every = [m.node for lead in published for m in lead.spread()]
    assert sorted(every) == sorted(BRANCHES)  # each published once, carried or not


def test_a_process_without_the_code_imports_none_of_it_to_group() -> None:
    """An API server or a client loads definitions without their handlers: an async one
    it cannot tell is carried like the rest (its worker publishes it on its own)."""
    wf = Workflow("w", version=1).parallel("fan", BRANCHES, next="done")
    for branch in BRANCHES:
        wf.task(branch, "tests.unit.no_such_module:handler" if branch == "b1" else NOOP)
    definition = wf.end("done").build(resolve=False)
    assert _carried(_grouping(definition)([_message(b) for b in BRANCHES]))["b1"] == [
        "b4",
        "b7",
        "b10",
    ]
    assert definition.nodes["b1"].handler.target is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "changed",
    [
        {"attempt": 2},
        {"resumed": True},
        {"woken": True},
        {"outbox_id": None},
        {"phase": Phase.COMPENSATE},
        {"workflow": "unknown"},
    ],
)
def test_only_a_first_attempt_with_an_outbox_row_is_carried(changed: dict[str, Any]) -> None:
    messages = [_message(b) for b in BRANCHES]
    messages[0] = replace(messages[0], **changed)
    published = _grouping(_fork())(messages)
    assert messages[0] in published  # alone, as it was
    assert all(s.node != "b1" for m in published for s in m.siblings)


def test_a_namespace_limit_admits_every_node_through_its_slots_so_nothing_is_grouped() -> None:
    messages = [_message(b) for b in BRANCHES]
    assert _grouping(_fork(), namespace_limits=True)(messages) == messages


def test_branches_share_a_message_only_with_their_runs_others_of_one_queue_priority_build() -> None:
    bands = [
        *(_message(b) for b in BRANCHES[:4]),
        *(_message(b, priority=2) for b in BRANCHES[4:8]),
        *(_message(b, run_id="r2") for b in BRANCHES[:4]),
        *(_message(b, build="v2") for b in BRANCHES[4:8]),
        *(_message(b, queue="gpu") for b in BRANCHES[8:]),  # two: too few to group
    ]
    published = grouped(bands, lambda _m: True, 4)
    leads = [m for m in published if m.siblings]
    assert len(leads) == 4 and len(published) == 6
    for lead in leads:
        carried = [s.of(lead) for s in lead.siblings]
        assert {(m.run_id, m.queue, m.priority, m.build) for m in carried} == {
            (lead.run_id, lead.queue, lead.priority, lead.build)
        }


def test_the_siblings_travel_in_a_header_never_in_the_body_or_the_row() -> None:
    lead = _grouping(_fork())([_message(b) for b in BRANCHES])[0]
    assert "siblings" not in lead.to_dict() and "siblings" not in lead.body()
    header = siblings_header(lead)
    assert header == [["b4", 1, 4], ["b7", 1, 7], ["b10", 1, 10]]
    received = with_siblings(NodeMessage.from_dict(lead.body()), header)
    assert received == lead
    assert with_siblings(NodeMessage.from_dict(lead.body()), None) == replace(lead, siblings=())


@pytest.mark.parametrize(
    "header",
    [
        "b2",
        [["b2", 1]],
        [["", 1, 2]],
        [["b2", 0, 2]],
        [["b2", 1, True]],
        [["b2\x00", 1, 2]],
        [["b2", 1, 2]] * (MAX_SIBLINGS + 1),
    ],
)
def test_a_malformed_header_is_refused_and_the_message_runs_alone(header: object) -> None:
    with pytest.raises(InvalidMessage):
        siblings_from_header(header)
    lead = _message("b1")
    assert with_siblings(lead, header) == lead  # the siblings' unsent rows are relayed


def test_a_sibling_is_its_own_first_attempt_made_from_the_lead() -> None:
    lead = _message("b1", priority=3, queue="q", build="v7", namespace="acme", attempt=2)
    sibling = Sibling("b4", 2, 44).of(replace(lead, resumed=True, woken=True))
    assert sibling == replace(
        lead, node="b4", iteration=2, attempt=1, outbox_id=44, resumed=False, woken=False
    )


def test_spread_gives_the_lead_and_each_sibling_as_messages_of_their_own() -> None:
    lead = _grouping(_fork())([_message(b) for b in BRANCHES])[0]
    assert [m.node for m in lead.spread()] == ["b1", "b4", "b7", "b10"]
    assert all(not m.siblings for m in lead.spread())
    broker = InProcessBroker()
    broker._threads.append(object())  # type: ignore[arg-type] - taking, as if started
    assert broker.publish([lead])
    assert broker.pending == 4  # nothing to save in one process: each its own


def test_a_sibling_is_taken_or_spilled_never_both() -> None:
    published: list[list[str]] = []
    lead = _grouping(_fork())([_message(b) for b in BRANCHES])[0]
    siblings = Siblings(lead, lambda messages: published.append([m.node for m in messages]))
    taken = siblings.take()
    assert taken is not None and taken.node == "b4"
    assert siblings.spill() == 2
    assert published == [["b7", "b10"]]
    assert siblings.take() is None and siblings.spill() == 0
    assert published == [["b7", "b10"]] and siblings.spilled == 2
    assert siblings.counts() == {"branches_carried": 1, "branches_spilled": 2}


def test_a_sibling_taken_then_published_alone_counts_as_spilled_not_carried() -> None:
    published: list[list[str]] = []
    lead = _grouping(_fork())([_message(b) for b in BRANCHES])[0]
    siblings = Siblings(lead, lambda messages: published.append([m.node for m in messages]))
    first, second = siblings.take(), siblings.take()
    assert first is not None and second is not None
    siblings.alone(first)  # an async one, say: awaited elsewhere
    assert published == [["b4"]]
    assert siblings.counts() == {"branches_carried": 1, "branches_spilled": 1}


class _Recording:
    def __init__(self) -> None:
        self.published: list[NodeMessage] = []

    def publish(self, messages: Any) -> bool:
        self.published.extend(messages)
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        return None


def test_spilled_siblings_are_published_each_on_its_own_never_grouped_again() -> None:
    publisher = _Recording()
    outbox = Outbox(None, publisher, grouping=_grouping(_fork()))  # type: ignore[arg-type]
    messages = [_message(b) for b in BRANCHES]
    outbox.publish(messages, group=False)
    assert publisher.published == messages
    outbox.publish(messages)
    assert len(publisher.published) == len(messages) + 3  # grouped: three leads
    assert sorted(outbox.sent.drain()) == sorted([*range(1, 11), 1, 2, 3])  # leads: 1, 2, 3
