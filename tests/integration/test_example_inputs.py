"""Every example declares its input, and a run started with input its schema refuses is
refused at submit — through the Python client and through the HTTP API, against a real
``cairn api`` on PostgreSQL — with the schema's own words, and nothing is written.

The examples are registered in a namespace of their own (``examples``): the deployment's
test workflows hold names (``agent_loop``) that the examples share.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cairn.errors import InvalidInput
from cairn.model.definition import WorkflowDefinition
from tests.support.api_server import Deployment, api_deployment, bearer
from tests.support.services import ROOT

KEY = "examples-key-0123456789abcdef"
NAMESPACE = "examples"

# workflow -> (an input its schema refuses, what the refusal must say)
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "book_flight": ({"q": "BER to LIS"}, "'origin' is a required property"),
    "agent_loop": ({"question": ""}, "question: '' should be non-empty"),
    "research_agent": ({"max_turns": "many"}, "max_turns: 'many' is not of type 'integer'"),
    "weekly_report": ({"week": "last week"}, "week: 'last week' does not match"),
}
ACCEPTED: dict[str, dict[str, Any]] = {
    "book_flight": {"origin": "BER", "destination": "LIS", "passengers": 2},
    "agent_loop": {"question": "2 + 3"},
    "research_agent": {"topics": ["checkpoint"], "max_turns": 5},
    "weekly_report": {"week": "2026-W48"},
}


@pytest.fixture(scope="module")
def deployment(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("example_inputs")
    with api_deployment(pg_template, tmp, api_env={"CAIRN_API_KEYS": f"{NAMESPACE}:{KEY}"}) as dep:
        client = dep.cluster.client
        client.register(ROOT / "examples", namespace=NAMESPACE)  # the YAML files
        client.register(ROOT / "examples" / "weekly_report.py", namespace=NAMESPACE)
        yield dep


@pytest.fixture(scope="module")
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deployment.base_url, timeout=20) as client:
        yield client


def runs(http: httpx.Client) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = http.get("/v1/runs", headers=bearer(KEY)).json()["runs"]
    return listed


def test_every_example_declares_an_input_schema(deployment: Deployment) -> None:
    registry = deployment.cluster.client.runtime.orchestrator.registry
    for workflow in REFUSED:
        definition: WorkflowDefinition = registry.get(f"{NAMESPACE}/{workflow}")
        assert definition.input_schema is not None, workflow


@pytest.mark.parametrize("workflow", sorted(REFUSED))
def test_the_python_client_refuses_input_the_schema_refuses(
    deployment: Deployment, http: httpx.Client, workflow: str
) -> None:
    bad, says = REFUSED[workflow]
    before = len(runs(http))
    with pytest.raises(InvalidInput) as refused:
        deployment.cluster.client.submit(workflow, bad, namespace=NAMESPACE)
    assert refused.value.code == "invalid_input"
    assert says in str(refused.value) and f"{workflow}@1" in str(refused.value)
    assert len(runs(http)) == before


@pytest.mark.parametrize("workflow", sorted(REFUSED))
def test_the_http_api_refuses_input_the_schema_refuses(http: httpx.Client, workflow: str) -> None:
    bad, says = REFUSED[workflow]
    before = len(runs(http))
    answer = http.post("/v1/runs", json={"workflow": workflow, "input": bad}, headers=bearer(KEY))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_input"
    assert says in error["message"]
    assert len(runs(http)) == before


@pytest.mark.parametrize("workflow", sorted(ACCEPTED))
def test_input_the_schema_accepts_starts_a_run(http: httpx.Client, workflow: str) -> None:
    answer = http.post(
        "/v1/runs",
        json={"workflow": workflow, "input": ACCEPTED[workflow]},
        headers=bearer(KEY),
    )
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]
    run = http.get(f"/v1/runs/{run_id}", headers=bearer(KEY)).json()
    assert run["workflow"] == workflow
