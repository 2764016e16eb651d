"""Patch markers: the rule that answers ``ctx.patched``, the answers carried on result
events into the run's state, a checkpoint's and a replay's answers. On the embedded
engine, an old run and a new one taking different paths that their replays reproduce:
tests/embedded/test_patches.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from cairn import Workflow
from cairn.decider.graph import decide
from cairn.model.events import (
    NodeFailed,
    NodeSucceeded,
    RunForked,
    event_from_dict,
    event_to_dict,
)
from cairn.model.patches import BadPatchId, answer, check_patch_id, ran_before, with_answers
from cairn.model.state import RunState
from cairn.store.records import CheckpointRecord
from cairn.testing.driver import Driver
from cairn.workers.context import StepContext
from tests.integration import patch_handlers
from tests.unit import handlers

PATCH = patch_handlers.PATCH


# -- the rule ---------------------------------------------------------------------------


def test_a_first_ask_is_true_unless_the_node_ran_before_and_then_the_answer_sticks() -> None:
    assert answer({}, "p", node_ran_before=False) is True
    assert answer({}, "p", node_ran_before=True) is False  # passed it on older code
    assert answer({"p": False}, "p", node_ran_before=False) is False
    assert answer({"p": True}, "p", node_ran_before=True) is True
    assert answer({"q": False}, "p", node_ran_before=False) is True  # each id its own
    assert not ran_before(1, "run")
    assert ran_before(2, "run") and ran_before(1, "compensate")


def test_the_first_answer_recorded_is_the_runs() -> None:
    held = {"p": False}
    assert with_answers(held, {"p": True, "q": True}) == {"p": False, "q": True}
    assert held == {"p": False}  # a new dict
    assert with_answers(held, None) == held


@pytest.mark.parametrize("good", ["fix-rounding", "a", "v2.pricing:tax_rule", "9" * 100])
def test_patch_ids(good: str) -> None:
    assert check_patch_id(good) == good


@pytest.mark.parametrize("bad", ["", "-leading", "has space", "x" * 101, "é", None, 7, "a/b"])
def test_a_bad_patch_id_is_refused_with_a_typed_error(bad: object) -> None:
    with pytest.raises(BadPatchId, match="a patch id is 1 to 100") as refused:
        check_patch_id(bad)
    assert refused.value.code == "bad_patch_id"


# -- events and state -------------------------------------------------------------------


def test_a_result_event_without_answers_is_written_as_before_patches_existed() -> None:
    plain = event_to_dict(NodeSucceeded(at=1.0, node="a"))
    assert "patches" not in plain
    assert "patches" not in event_to_dict(NodeFailed(at=1.0, node="a", message="boom"))
    marked = event_to_dict(NodeFailed(at=1.0, node="a", patches={PATCH: True}))
    assert marked["patches"] == {PATCH: True}
    assert event_from_dict(marked) == NodeFailed(at=1.0, node="a", patches={PATCH: True})


def test_the_answers_are_part_of_the_state_and_left_out_while_there_are_none() -> None:
    state = RunState("r", "w", 1)
    assert "patches" not in state.to_dict()
    state.patches[PATCH] = False
    copied = state.copy()
    copied.patches["other"] = True
    assert state.patches == {PATCH: False}
    assert RunState.from_dict(state.to_dict()).patches == {PATCH: False}
    assert RunState.from_dict(RunState("r", "w", 1).to_dict()).patches == {}


def loop() -> Workflow:
    wf = Workflow("loop", version=1)
    wf.task("price", handlers.noop, next="review", max_visits=10)
    wf.wait(
        "review", signals={"again": "price", "approve": "done"}, timeout="1h", on_timeout="done"
    )
    return wf.end("done")


def report(driver: Driver, node: str, answers: dict[str, bool] | None) -> None:
    command = driver.take(node)
    event = NodeSucceeded(
        at=driver.tick(),
        node=node,
        iteration=command.iteration,
        attempt=command.attempt,
        patches=answers,
    )
    driver.apply(event)


def test_the_decider_keeps_each_first_answer_and_a_fork_carries_them() -> None:
    definition = loop().build()
    driver = Driver(definition)
    driver.start()
    report(driver, "price", None)
    assert driver.state.patches == {}
    driver.signal("again")
    report(driver, "price", {PATCH: False})
    driver.signal("again")
    report(driver, "price", {PATCH: True, "later": True})  # two tellings: the first holds
    assert driver.state.patches == {PATCH: False, "later": True}
    stale = NodeSucceeded(at=driver.tick(), node="price", iteration=1, patches={"stale": True})
    assert decide(definition, driver.state, stale).ignored is not None
    fresh = RunState("fork-1", definition.name, definition.version)
    forked = RunForked(at=driver.tick(), parent_run_id="run-1", state=driver.state.to_dict())
    assert decide(definition, fresh, forked).state.patches == {PATCH: False, "later": True}


# -- the step context -------------------------------------------------------------------


def context(
    iteration: int = 1,
    phase: str = "run",
    held: dict[str, bool] | None = None,
    **extra: object,
) -> StepContext:
    state = RunState("r", "loop", 1)
    state.patches = dict(held or {})
    return StepContext(
        run_id="r",
        workflow="loop",
        node="price",
        iteration=iteration,
        attempt=1,
        phase=phase,
        state=state,
        **extra,  # type: ignore[arg-type]
    )


def test_ctx_patched_answers_by_the_rule_and_keeps_what_it_told() -> None:
    ctx = context()
    assert ctx.patched(PATCH) is True and ctx.patched(PATCH) is True
    assert context(iteration=2).patched(PATCH) is False
    assert context(phase="compensate").patched(PATCH) is False
    again = context(iteration=3, held={PATCH: True})
    assert again.patched(PATCH) is True and again.patched("new") is False
    assert again.patches == {PATCH: True, "new": False}
    with pytest.raises(BadPatchId):
        ctx.patched("")
    assert ctx.patches == {PATCH: True}


def test_an_async_handler_asks_the_same() -> None:
    async def handler(ctx: StepContext) -> bool:
        await asyncio.sleep(0)
        return ctx.patched(PATCH)

    assert asyncio.run(handler(context())) is True
    assert asyncio.run(handler(context(iteration=2))) is False


def test_a_replay_answers_from_the_record_and_false_for_what_it_never_asked() -> None:
    ctx = context(held={PATCH: True}, recorded_patches={"told": True})
    assert ctx.patched("told") is True
    assert ctx.patched(PATCH) is False  # the recorded execution never asked
    assert ctx.patches == {"told": True, PATCH: False}


def test_a_checkpoint_keeps_the_answers_and_a_resumed_execution_gives_them_again() -> None:
    first = context()
    assert "patches" not in first.working_context()
    first.patched(PATCH)
    saved = first.working_context()
    assert saved["patches"] == {PATCH: True}
    # Resumed on a later visit where the rule would say False: the checkpoint's answer.
    record = CheckpointRecord(1, 1, 1, saved, datetime.now(UTC))
    resumed = context(iteration=2, restored=record)
    assert resumed.patched(PATCH) is True and resumed.patches == {PATCH: True}
