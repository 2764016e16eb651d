"""Routing nodes to queues: the ``queue`` keys of a definition and their faults, the
queue a node message carries (and its JSON without one), the dispatches the engine
plans, an ephemeral chain that stops at a change of queue, and the deployment's declared
queues (CAIRN_QUEUES) refusing at registration, in ``cairn validate`` and in ``cairn
worker --queues``. The engine dispatching and recovering to a node's queue, its nodes
run: tests/embedded/test_queues.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Workflow, load_definition
from cairn.cli.main import app, main
from cairn.config import Settings
from cairn.decider.fusion import fused_next
from cairn.decider.graph import decide
from cairn.definitions.queues import check_queues
from cairn.engine.registry import Registry
from cairn.errors import (
    ConfigError,
    QueueUse,
    UndeclaredQueue,
    UnknownWorkflow,
    WorkflowDefinitionError,
)
from cairn.model.definition import TaskNode, WorkflowDefinition
from cairn.model.events import NodeSucceeded, Phase, RunStarted
from cairn.model.messages import InvalidMessage, NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.queues import MAX_QUEUE_NAME
from cairn.model.state import RunState
from cairn.model.statuses import NodeStatus
from cairn.runtime import Runtime
from cairn.store.sql import Store
from tests.unit.test_loader import faults_of, pairs, spec_with

REPO_ROOT = Path(__file__).resolve().parents[2]
NOOP = "tests.unit.handlers:noop"
BY_FLAG = "tests.unit.handlers:by_flag"


def routed(**top: Any) -> dict[str, Any]:
    """``a`` (on the gpu queue) then ``b`` (no queue of its own)."""
    return spec_with(
        {
            "a": {"handler": NOOP, "queue": "gpu", "next": "b"},
            "b": {"handler": NOOP, "next": "done"},
        },
        **top,
    )


def task(definition: WorkflowDefinition, node_id: str) -> TaskNode:
    node = definition.node(node_id)
    assert isinstance(node, TaskNode)
    return node


# -- the definition ----------------------------------------------------------------------


def test_a_task_names_its_queue_and_the_workflow_a_default_for_the_others() -> None:
    plain = load_definition(routed())
    assert (task(plain, "a").queue, task(plain, "b").queue, plain.queue) == ("gpu", None, None)
    assert plain.queues() == {"a": "gpu"}
    assert plain.queue_of("a") == "gpu" and plain.queue_of("b") is None

    defaulted = load_definition(routed(queue="cpu-big"))
    assert (task(defaulted, "a").queue, task(defaulted, "b").queue) == ("gpu", "cpu-big")
    assert defaulted.queue == "cpu-big"
    assert defaulted.queues() == {"a": "gpu", "b": "cpu-big"}  # not the end node: no worker


def test_branches_decisions_and_compensations_go_where_their_nodes_say() -> None:
    spec = spec_with(
        {
            "a": {"parallel": ["gpu_part", "cpu_part"], "next": "decide"},
            "gpu_part": {"handler": NOOP, "queue": "gpu"},
            "cpu_part": {"handler": NOOP},
            "decide": {"branch": {"guard": BY_FLAG, "cases": {"true": "done", "false": "done"}}},
        },
        queue="cpu",
    )
    definition = load_definition(spec)
    assert definition.queues() == {"gpu_part": "gpu", "cpu_part": "cpu", "decide": "cpu"}
    # A node that is not a task runs on a worker only for its compensation: the default.
    assert definition.queue_of("a") == "cpu"


def test_the_builder_passes_queue_through_and_equals_the_file_form() -> None:
    wf = Workflow("w", version=1, queue="cpu-big")
    wf.task("a", NOOP, queue="gpu", next="b").task("b", NOOP, next="done").end("done")
    built = wf.build()
    assert built == load_definition(routed(queue="cpu-big"))
    assert (task(built, "a").queue, task(built, "b").queue) == ("gpu", "cpu-big")


@pytest.mark.parametrize(
    ("queue", "why"),
    [
        ("", "non-empty string"),
        (7, "non-empty string"),
        (None, "non-empty string"),
        ("gpu queue", "may only hold letters, digits"),
        ("gpu/a", "may only hold letters, digits"),
        ("-gpu", "starts with a letter or a digit"),
        ("g" * (MAX_QUEUE_NAME + 1), f"longer than {MAX_QUEUE_NAME} characters"),
    ],
)
def test_a_queue_that_is_not_a_queue_name_is_a_fault(queue: object, why: str) -> None:
    faults = faults_of(spec_with({"a": {"handler": NOOP, "queue": queue, "next": "done"}}))
    assert [(f.code, f.node) for f in faults] == [("bad_queue", "a")]
    assert why in faults[0].message
    faults = faults_of(spec_with({"a": {"handler": NOOP, "next": "done"}}, queue=queue))
    assert [(f.code, f.node) for f in faults] == [("bad_queue", None)]


def test_the_longest_queue_name_and_every_allowed_character_are_accepted() -> None:
    for name in ("g" * MAX_QUEUE_NAME, "GPU_a100-x2.eu", "0"):
        spec = spec_with({"a": {"handler": NOOP, "queue": name, "next": "done"}})
        assert task(load_definition(spec), "a").queue == name


def test_queue_is_for_tasks_a_worker_runs() -> None:
    waiting = {"wait": {"signals": {"go": "done"}, "timeout": "1h", "on_timeout": "done"}}
    faults = faults_of(spec_with({"a": {**waiting, "queue": "gpu"}}))
    assert [(f.code, f.node, f.message) for f in faults] == [
        ("unknown_key", "a", "key 'queue' does not apply here (it is for task nodes)")
    ]
    child = {"child": "other", "next": "done", "queue": "gpu"}
    faults = faults_of(spec_with({"a": child}))
    assert pairs(faults) == {("bad_value", "a")}
    assert "a child run runs on none" in faults[0].message
    # The workflow's default passes a child run by: its own nodes say where they run.
    definition = load_definition(spec_with({"a": {"child": "other", "next": "done"}}, queue="gpu"))
    assert task(definition, "a").queue is None and definition.queues() == {}


def test_queue_came_in_format_2() -> None:
    for spec in (
        routed(format=1),
        spec_with({"a": {"handler": NOOP, "next": "done"}}, format=1, queue="gpu"),
    ):
        faults = faults_of(spec)
        assert {f.code for f in faults} == {"newer_key"}
        assert "key 'queue' came in definition format 2" in faults[0].message


def test_a_misspelt_queue_key_is_caught() -> None:
    faults = faults_of(spec_with({"a": {"handler": NOOP, "queeu": "gpu", "next": "done"}}))
    assert [(f.code, f.message) for f in faults] == [
        ("unknown_key", "unknown key 'queeu' (did you mean 'queue'?)")
    ]


# -- the message -------------------------------------------------------------------------


def test_a_message_carries_its_queue_and_reads_without_one() -> None:
    routed_message = NodeMessage("r", "w", 1, "render", 1, 2, Phase.RUN, 7, queue="gpu")
    body = routed_message.to_dict()
    assert body["queue"] == "gpu"
    assert NodeMessage.from_dict(body) == routed_message
    plain = NodeMessage("r", "w", 1, "prepare", 1, 1)
    assert "queue" not in plain.to_dict()  # as every message read before queues existed
    assert NodeMessage.from_dict(plain.to_dict()).queue is None
    old = {
        "run_id": "r",
        "workflow": "w",
        "version": 1,
        "node": "prepare",
        "iteration": 1,
        "attempt": 1,
        "phase": "run",
        "outbox_id": None,
    }
    assert NodeMessage.from_dict(old) == plain
    assert NodeMessage.from_dict({**old, "queue": None}) == plain


@pytest.mark.parametrize("queue", ["", 3, "a b", ["gpu"]])
def test_a_message_with_a_bad_queue_is_refused_whole(queue: object) -> None:
    body = {**NodeMessage("r", "w", 1, "a", 1, 1).to_dict(), "queue": queue}
    with pytest.raises(InvalidMessage, match="queue"):
        NodeMessage.from_dict(body)


# -- dispatch ----------------------------------------------------------------------------


class Captured:
    """A publisher that keeps what it is given, with a backlog per queue."""

    def __init__(self) -> None:
        self.messages: list[NodeMessage] = []
        self.queued: dict[str | None, int] = {}
        self.asked: list[str | None] = []

    def publish(self, messages: Sequence[NodeMessage]) -> bool:
        self.messages.extend(messages)
        return True

    def backlog(self, queue: str | None = None) -> int | None:
        self.asked.append(queue)
        return self.queued.get(queue, 0)

    def take(self, node: str) -> NodeMessage:
        (found,) = [m for m in self.messages if m.node == node]
        self.messages.remove(found)
        return found


def test_an_ephemeral_chain_stops_where_the_queue_changes() -> None:
    def chain(fetch: str | None, then: str | None) -> WorkflowDefinition:
        wf = Workflow("lookup", version=1)
        wf.task("fetch", NOOP, next="then", persist="ephemeral", queue=fetch)
        wf.task("then", NOOP, next="done", queue=then)
        return wf.end("done").build()

    def fused(definition: WorkflowDefinition) -> tuple[RunState, NodeMessage] | None:
        state = decide(definition, RunState("r", "lookup", 1), RunStarted(at=1.0)).state
        message = NodeMessage("r", "lookup", 1, "fetch", 1, 1, queue=definition.queue_of("fetch"))
        event = NodeSucceeded(at=0.0, node="fetch", output={})
        outcome = NodeOutcome(event, NodeStatus.SUCCEEDED, result={})
        return fused_next(definition, state, message, outcome, now=2.0)

    assert fused(chain(None, "gpu")) is None  # this worker may have no GPU
    assert fused(chain("gpu", None)) is None  # nor the default queue's code
    for fetch, then in ((None, None), ("gpu", "gpu")):
        following = fused(chain(fetch, then))
        assert following is not None
        assert (following[1].node, following[1].queue) == ("then", then)


# -- declared queues ---------------------------------------------------------------------


def test_registering_a_queue_the_deployment_does_not_declare_is_refused(store: Store) -> None:
    registry = Registry(store, queues=["gpu", "cpu-big"], default_queue="cairn")
    typo = load_definition(
        spec_with(
            {
                "a": {"handler": NOOP, "queue": "gpux", "next": "b"},
                "b": {"handler": NOOP, "queue": "accelerator", "next": "c"},
                "c": {"handler": NOOP, "queue": "gpu", "next": "d"},
                "d": {"handler": NOOP, "queue": "cairn", "next": "done"},
            }
        )
    )
    good = load_definition({**routed(), "name": "good"})
    with pytest.raises(UndeclaredQueue) as caught:
        registry.register_all([good, typo])
    refused = caught.value
    assert isinstance(refused, WorkflowDefinitionError)  # the CLI lists its faults
    assert refused.code == "undeclared_queue"
    assert refused.undeclared == [QueueUse("w@1", "a", "gpux"), QueueUse("w@1", "b", "accelerator")]
    assert refused.declared == ("cairn", "cpu-big", "gpu")
    assert [(f.code, f.node) for f in refused.faults] == [
        ("undeclared_queue", "a"),
        ("undeclared_queue", "b"),
    ]
    assert refused.faults[0].message == (
        "w@1: queue 'gpux' is not one this deployment's workers consume (CAIRN_QUEUES and "
        "the default queue: cairn, cpu-big, gpu) (did you mean 'gpu'?)"
    )
    assert "did you mean" not in refused.faults[1].message
    assert refused.to_dict()["undeclared"][0] == {"workflow": "w@1", "node": "a", "queue": "gpux"}
    for name in ("good", "w"):  # all or nothing: the good one was not registered either
        with pytest.raises(UnknownWorkflow):
            Registry(store).get(name, 1)
    with pytest.raises(UndeclaredQueue):
        registry.register(typo)
    assert registry.register(good)


def test_a_workflow_default_outside_the_declared_queues_is_one_fault() -> None:
    definition = load_definition(routed(queue="cpux"))
    with pytest.raises(UndeclaredQueue) as caught:
        check_queues([definition], ["gpu", "cpu"], "cairn")
    assert caught.value.undeclared == [QueueUse("w@1", None, "cpux")]
    assert "its tasks' default queue 'cpux'" in caught.value.faults[0].message


def test_without_declared_queues_any_queue_is_accepted(store: Store) -> None:
    assert Registry(store).register(load_definition(routed(queue="anything")))
    check_queues([load_definition(routed())], [], "cairn")


def test_cairn_queues_is_a_list_of_queue_names() -> None:
    assert Settings.from_env({}).queues == []
    assert Settings.from_env({"CAIRN_QUEUES": " gpu, cpu-big ,"}).queues == ["gpu", "cpu-big"]
    with pytest.raises(ConfigError, match=r"CAIRN_QUEUES: .*'gpu a'"):
        Settings.from_env({"CAIRN_QUEUES": "gpu a"})
    with pytest.raises(ConfigError, match="CAIRN_QUEUS"):  # a typo is not a setting
        Settings.from_env({"CAIRN_QUEUS": "gpu"})


def test_a_runtime_with_declared_queues_refuses_its_workflows_at_start(tmp_path: Path) -> None:
    """A worker, scheduler or API process registers CAIRN_WORKFLOWS when it starts."""
    workflows = str(REPO_ROOT / "tests" / "integration" / "workflows" / "routed.yaml")
    settings = Settings(home=tmp_path, workflows=[workflows], queues=["cpu"])
    with pytest.raises(UndeclaredQueue, match="queue 'gpu'"):
        Runtime.build(settings)
    Runtime.build(settings.model_copy(update={"queues": ["gpu"]})).close()


# -- the command line --------------------------------------------------------------------


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for key in list(os.environ):
        if key.startswith("CAIRN_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("CAIRN_HOME", str(tmp_path / "home"))
    return CliRunner()


ROUTED = "tests/integration/workflows/routed.yaml"


def test_validate_checks_the_declared_queues_when_they_are_set(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.invoke(app, ["validate", ROUTED]).exit_code == 0  # no declaration: any queue
    monkeypatch.setenv("CAIRN_QUEUES", "gpu")
    assert cli.invoke(app, ["validate", ROUTED]).exit_code == 0
    monkeypatch.setenv("CAIRN_QUEUES", "gpus,batch")
    result = cli.invoke(app, ["validate", ROUTED, "examples/book_flight.yaml"])
    assert result.exit_code == 2, result.output
    assert "ok   book_flight@1" in result.stdout
    text = " ".join(result.stderr.split())
    assert f"fail {ROUTED}" in text
    assert "node 'render': routed@1: queue 'gpu' is not one this deployment's workers" in text
    assert "(did you mean 'gpus'?) [undeclared_queue]" in text
    assert "1 of 2 definition(s) invalid" in text


def test_register_refuses_an_undeclared_queue_and_registers_nothing(
    cli: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Through the command's own entry point, as ``python -m cairn.cli`` runs it."""

    def register(queues: str) -> tuple[object, str, str]:
        monkeypatch.setenv("CAIRN_QUEUES", queues)
        monkeypatch.setattr(sys, "argv", ["cairn", "register", "examples/book_flight.yaml", ROUTED])
        with pytest.raises(SystemExit) as exited:
            main()
        said = capsys.readouterr()
        return exited.value.code, said.out, said.err

    code, out, err = register("cpu")
    assert code == 2, err
    assert "Traceback" not in err and "registered" not in out
    text = " ".join(err.split())
    assert "node 'render': routed@1: queue 'gpu' is not one this deployment's workers" in text
    # Nothing was written: the database was not even opened.
    assert not (tmp_path / "home" / "cairn.db").exists()
    code, out, err = register("gpu")
    assert code in (0, None), err
    assert "registered book_flight@1" in out
    assert "registered routed@1" in out


def test_a_worker_consumes_only_queues_the_deployment_declares(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before it connects anywhere: nothing listens on port 1."""
    monkeypatch.setenv("CAIRN_BROKER_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("CAIRN_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("CAIRN_QUEUES", "gpu")
    result = cli.invoke(app, ["worker", "--queues", "gpu,gpux"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "'gpux': not a queue of this deployment" in text
    assert "(CAIRN_QUEUES and the default queue: cairn, gpu)" in text
    result = cli.invoke(app, ["worker", "--queues", "gpu a"])
    assert result.exit_code == 2
    assert "queue name 'gpu a'" in " ".join(result.output.split())
