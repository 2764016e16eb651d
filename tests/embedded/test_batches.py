"""Submitting in batches on the embedded default: per-item answers, request ids taken
before or within the batch, and the runs really start, on its worker threads."""

from __future__ import annotations

from pathlib import Path

from cairn.engine.batches import SubmitItem
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.support.embedded import settings, wait


def test_a_batch_answers_each_item_and_starts_the_good_ones(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    runtime.start_workers()
    try:
        orchestrator = runtime.orchestrator
        ledger = {"ledger": str(tmp_path / "ledger")}
        taken = orchestrator.submit("chain10", ledger, request_id="taken")
        answers = orchestrator.submit_batch(
            [
                SubmitItem("chain10", ledger, request_id="r1"),
                SubmitItem("chain10", ["not", "an", "object"]),  # type: ignore[arg-type]
                SubmitItem("no_such_flow"),
                SubmitItem("chain10", ledger, request_id="r1"),
                SubmitItem("chain10", ledger, request_id="taken"),
            ]
        )
        assert [a.index for a in answers] == [0, 1, 2, 3, 4]
        assert answers[1].error_code == "invalid_input" and answers[1].run_id is None
        assert answers[2].to_dict()["error"]["code"] == "unknown_workflow"
        assert answers[3].run_id == answers[0].run_id and not answers[3].created
        assert answers[4].run_id == taken and not answers[4].created
        started = [a.run_id for a in answers if a.created]
        assert answers[0].run_id in started
        for run_id in started:
            assert run_id is not None
            wait(runtime, run_id)
        assert orchestrator.get_run(str(answers[0].run_id)).status is RunStatus.SUCCEEDED
    finally:
        runtime.close()
