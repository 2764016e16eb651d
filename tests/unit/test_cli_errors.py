"""Every refusal the command line prints has one shape: ``error: what, and why [code] —
what to do``, in direct and in remote mode."""

from __future__ import annotations

import pytest

from cairn.cli.remote import error_line
from cairn.errors import DefinitionFault, RunNotFound, SchemaOutOfDate, WorkflowDefinitionError
from cairn.http.errors import ERROR_TYPES, ApiError


def test_a_direct_refusal_names_its_code_and_what_to_do() -> None:
    line = error_line(RunNotFound("no run r-1"))
    assert (
        line
        == "error: no run r-1 [run_not_found] — `cairn runs` lists the runs this namespace may see"
    )


def test_an_error_whose_message_says_what_to_do_has_no_hint() -> None:
    line = error_line(SchemaOutOfDate("the database has no cairn schema: run `cairn db upgrade`"))
    assert line.endswith("[schema_out_of_date]")


def test_a_definitions_faults_follow_its_line() -> None:
    faults = [DefinitionFault("unknown_target", "leads to 'x', which is not a node", "a")]
    first, *rest = error_line(WorkflowDefinitionError(faults, source="wf.yaml")).splitlines()
    assert first.startswith(
        "error: wf.yaml: 1 problem(s) in workflow definition [invalid_definition] — "
    )
    assert rest == ["  - node 'a': leads to 'x', which is not a node [unknown_target]"]


@pytest.mark.parametrize(
    ("status", "code", "hint"),
    [
        (404, "run_not_found", "`cairn runs`"),
        (401, "unauthorized", "check CAIRN_API_KEY"),
        (403, "forbidden", "ask an admin for a key"),
    ],
)
def test_a_remote_refusal_adds_the_http_status(status: int, code: str, hint: str) -> None:
    error = ERROR_TYPES.get(code, ApiError)("refused", status=status, code=code)
    line = error_line(error)
    assert line.startswith(f"error: refused [HTTP {status} {code}] — ") and hint in line


def test_an_unreachable_api_says_which_address_it_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_API_URL", "http://api.example:8000")
    line = error_line(ApiError("the API did not answer", status=None, code="unreachable"))
    assert line == (
        "error: the API did not answer [unreachable] — "
        "is CAIRN_API_URL (http://api.example:8000) right, and the API up?"
    )
