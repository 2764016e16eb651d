"""Rate limits in this process: the ``rate:`` declaration and its faults, the buckets a
node's calls take from, a call's reservation, a provider's Retry-After, and the line
``cairn status`` prints per key. ``ctx.model`` under a limit with the real SDKs against
the model stand-in: tests/embedded/test_rate_limits.py. The buckets' own rules on both
backends: tests/contract/test_rates.py; on real services:
tests/acceptance/test_rate_limits.py."""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Any

import pytest

from cairn.definitions.loader import load_definition
from cairn.errors import WorkflowDefinitionError
from cairn.limits.limiter import retry_after
from cairn.limits.rates import Bucket, BucketReport, buckets_for, reservation
from cairn.model.definition import Rate, RateLimit, TaskNode


def handler(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {}


def _spec(rate: object, *, on_workflow: object = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "w",
        "version": 1,
        "start": "a",
        "nodes": {
            "a": {"handler": f"{__name__}:handler", "rate": rate, "next": "b"},
            "b": {"end": "succeeded"},
        },
    }
    if on_workflow is not None:
        spec["rate"] = on_workflow
    return spec


def test_a_rate_is_read_per_second_minute_or_hour_and_buckets_are_per_key_value() -> None:
    definition = load_definition(
        _spec(
            [{"key": "input.tenant", "requests": "10/s"}, {"key": "openai", "tokens": "5000/h"}],
            on_workflow={"key": "openai", "requests": "600/min", "tokens": "200000/min"},
        )
    )
    node = definition.nodes["a"]
    assert isinstance(node, TaskNode)
    assert node.rate == (
        RateLimit("input.tenant", requests=Rate(10, 1.0)),
        RateLimit("openai", tokens=Rate(5000, 3600.0)),
    )
    assert definition.rate == (RateLimit("openai", Rate(600, 60.0), Rate(200_000, 60.0)),)
    buckets = buckets_for(definition, node, namespace="acme", state={}, run_input={"tenant": "t1"})
    # The key both name: the node's limit of each kind (tokens), else the workflow's.
    assert buckets == [
        Bucket("acme/input.tenant=t1", requests=Rate(10, 1.0)),
        Bucket("acme/openai", requests=Rate(600, 60.0), tokens=Rate(5000, 3600.0)),
    ]


@pytest.mark.parametrize(
    ("rate", "says"),
    [
        ({"key": "openai"}, "needs requests: N/PERIOD, tokens: N/PERIOD or both"),
        ({"key": "openai", "requests": "600/minute"}, None),  # fine
        ({"key": "openai", "requests": "600/day"}, "positive count per s, min or h"),
        ({"key": "openai", "requests": "0/s"}, "positive count"),
        ({"key": "openai", "requests": 600}, "positive count"),
        ({"key": "openai", "tokens": "lots"}, "'rate.tokens' is a positive count"),
        ({"key": "open ai", "requests": "1/s"}, "constant is up to 100"),
        ({"key": "state.", "requests": "1/s"}, "not a path"),
        ({"requests": "1/s"}, "'rate.key' is a path"),
        ({"key": "k", "request": "1/s"}, "did you mean 'requests'"),
        ([{"key": "k", "requests": "1/s"}, {"key": "k", "tokens": "9/s"}], "twice"),
        ("600/min", "is {key: EXPRESSION"),
    ],
)
def test_a_malformed_rate_is_a_fault(rate: object, says: str | None) -> None:
    if says is None:
        load_definition(_spec(rate))
        return
    with pytest.raises(WorkflowDefinitionError, match=says.replace("{", r"\{")):
        load_definition(_spec(rate))


def test_a_rate_on_a_task_without_a_handler_or_in_format_1_is_a_fault() -> None:
    spec = _spec({"key": "k", "requests": "1/s"})
    spec["nodes"]["a"].pop("handler")
    spec["nodes"]["a"]["child"] = {"workflow": "other"}  # a child run: no calls of its own
    with pytest.raises(WorkflowDefinitionError, match="'rate' limits a handler's model calls"):
        load_definition(spec)
    old = {**_spec({"key": "k", "requests": "1/s"}), "format": 1}
    with pytest.raises(WorkflowDefinitionError, match="rate"):
        load_definition(old)


def test_a_calls_reservation_is_its_prompt_and_the_most_it_may_answer() -> None:
    assert reservation(30, {"max_tokens": 500}, 1024) == 530
    assert reservation(30, {"max_completion_tokens": 64}, 1024) == 94
    assert reservation(30, {"max_output_tokens": 7}, 1024) == 37
    assert reservation(30, {}, 1024) == 1054


def test_retry_after_is_seconds_milliseconds_or_an_http_date() -> None:
    class Refusal(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            self.response = type("R", (), {"headers": headers})()

    assert retry_after(Refusal({"retry-after": "5"})) == 5.0
    assert retry_after(Refusal({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    in_three = retry_after(Refusal({"retry-after": formatdate(time.time() + 3, usegmt=True)}))
    assert in_three is not None and 1.5 < in_three <= 3.0
    assert retry_after(Refusal({})) is None


# -- what an operator sees ---------------------------------------------------------------


def test_status_prints_a_line_per_key() -> None:
    from cairn.cli.fleet import rate_line  # noqa: PLC0415 - the CLI's own rendering

    report = BucketReport("default/openai", 600, 60.25, 412, 200_000, 60.25, 151_234, 6, 4.2)
    assert rate_line(report) == (
        "rate default/openai: requests 412/600 per 60 s, tokens 151234/200000 per 60 s, "
        "6 waiting, paused 4.2s more (429)"
    )
