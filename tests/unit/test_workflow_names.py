"""Which workflow a name means: ``namespace/workflow@version`` as people and definitions
write it, and the qualified form messages and task names carry."""

from __future__ import annotations

import pytest

from cairn.errors import InvalidInput
from cairn.model.messages import NodeMessage
from cairn.model.workflow_names import (
    BadWorkflowName,
    WorkflowName,
    qualified,
    unqualified,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("checkout", WorkflowName("checkout")),
        ("checkout@3", WorkflowName("checkout", version=3)),
        ("acme/checkout", WorkflowName("checkout", "acme")),
        ("acme/checkout@12", WorkflowName("checkout", "acme", 12)),
        ("team-2.eu/check_out.v2@1", WorkflowName("check_out.v2", "team-2.eu", 1)),
        ("_private", WorkflowName("_private")),
    ],
)
def test_a_written_name_says_its_namespace_and_version(text: str, expected: WorkflowName) -> None:
    parsed = WorkflowName.parse(text)
    assert parsed == expected
    assert str(parsed) == text  # and reads back as written


@pytest.mark.parametrize(
    "text",
    [
        "",
        "@3",
        "checkout@",
        "checkout@0",
        "checkout@-1",
        "checkout@v3",
        "checkout@99999999999",
        "/checkout",
        "acme/",
        "a/b/checkout",
        "acme/checkout@1@2",
        "-acme/checkout",
        "ac me/checkout",
        "acme/9checkout",
        "acme/check out",
        "x" * 101 + "/checkout",
        "w" * 201,
    ],
)
def test_anything_else_is_refused_with_a_typed_error(text: str) -> None:
    with pytest.raises(BadWorkflowName) as refused:
        WorkflowName.parse(text)
    assert isinstance(refused.value, InvalidInput)  # a 422 over HTTP, exit 2 in the CLI
    assert refused.value.code == "bad_workflow_name"


def test_a_bare_name_means_the_speakers_namespace() -> None:
    assert WorkflowName.parse("checkout").owner("beta") == "beta"
    assert WorkflowName.parse("acme/checkout").owner("beta") == "acme"


def test_a_version_given_apart_pins_the_name_unless_they_disagree() -> None:
    assert WorkflowName.parse("checkout").pinned(4) == WorkflowName("checkout", version=4)
    assert WorkflowName.parse("checkout@4").pinned(4).version == 4
    assert WorkflowName.parse("checkout@4").pinned(None).version == 4
    with pytest.raises(BadWorkflowName, match="pins version 4"):
        WorkflowName.parse("checkout@4").pinned(5)


def test_the_default_namespace_keeps_bare_names_in_messages_and_task_names() -> None:
    assert qualified("default", "checkout") == "checkout"
    assert qualified("acme", "checkout") == "acme/checkout"
    assert unqualified("checkout") == ("default", "checkout")
    assert unqualified("acme/checkout") == ("acme", "checkout")
    ours = NodeMessage("r", qualified("default", "checkout"), 1, "charge", 1, 1)
    theirs = NodeMessage("r", qualified("acme", "checkout"), 1, "charge", 1, 1)
    assert ours.task_name == "checkout.charge"  # what a deployed fleet already shows
    assert theirs.task_name == "acme/checkout.charge"
    # The JSON of a default namespace's message is what it always was.
    assert ours.to_dict()["workflow"] == "checkout"
    assert NodeMessage.from_dict(theirs.to_dict()) == theirs
