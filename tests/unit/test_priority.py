"""Run priority and namespace weights: what is accepted, and the broker levels they make."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.config import Settings
from cairn.engine.batches import SubmitItem
from cairn.errors import ConfigError
from cairn.model.messages import InvalidMessage, NodeMessage
from cairn.model.priority import InvalidPriority, check_priority
from cairn.workers.fairness import BANDS, LEVELS, PRIORITY_STEPS, band, level


@pytest.mark.parametrize("value", [-5, 0, 5, None])
def test_a_priority_is_an_integer_from_minus_five_to_five(value: int | None) -> None:
    assert check_priority(value) == (value or 0)


@pytest.mark.parametrize("value", [6, -6, 100, 1.0, "1", True, [1]])
def test_anything_else_is_refused_with_a_typed_error(value: Any) -> None:
    with pytest.raises(InvalidPriority) as refused:
        check_priority(value)
    assert refused.value.code == "invalid_priority"
    assert "-5 to 5" in str(refused.value)


def test_a_message_carries_priority_and_namespace_only_when_not_the_default() -> None:
    plain = NodeMessage("r", "w", 1, "n", 1, 1)
    assert "priority" not in plain.to_dict() and "namespace" not in plain.to_dict()
    urgent = NodeMessage("r", "w", 1, "n", 1, 1, priority=3, namespace="acme")
    assert urgent.to_dict()["priority"] == 3
    assert urgent.to_dict()["namespace"] == "acme"  # the outbox row keeps it
    assert "namespace" not in urgent.body()  # the broker's body: a header carries it
    assert NodeMessage.from_dict(urgent.to_dict()) == urgent
    assert NodeMessage.from_dict(urgent.body()) == NodeMessage("r", "w", 1, "n", 1, 1, priority=3)


@pytest.mark.parametrize(
    "field", [{"priority": 9}, {"priority": "1"}, {"priority": True}, {"namespace": ""}]
)
def test_a_message_with_a_bad_priority_or_namespace_is_refused(field: dict[str, Any]) -> None:
    body = {**NodeMessage("r", "w", 1, "n", 1, 1).to_dict(), **field}
    with pytest.raises(InvalidMessage):
        NodeMessage.from_dict(body)


def test_a_batch_item_reads_its_priority() -> None:
    assert SubmitItem.from_dict({"workflow": "w", "priority": -2}).priority == -2
    assert SubmitItem.from_dict({"workflow": "w"}).priority is None


def test_namespace_weights_are_read_from_the_environment() -> None:
    settings = Settings.from_env({"CAIRN_NAMESPACE_WEIGHTS": "acme=3, beta=1"})
    assert settings.namespace_weights == {"acme": 3, "beta": 1}
    assert Settings.from_env({}).namespace_weights == {}
    assert Settings.from_env({"CAIRN_FAIRNESS": "off"}).fairness is False


@pytest.mark.parametrize(
    "value", ["acme", "acme=", "=3", "acme=0", "acme=-1", "acme=x", "acme=1.5", "a=1,a=2"]
)
def test_a_malformed_weight_is_a_startup_error(value: str) -> None:
    with pytest.raises(ConfigError, match=r"namespace_weights|NAMESPACE_WEIGHTS"):
        Settings.from_env({"CAIRN_NAMESPACE_WEIGHTS": value})


def test_a_namespaces_nth_queued_message_goes_in_band_log2_n_by_its_weight() -> None:
    assert [band(n) for n in (1, 2, 3, 4, 7, 8, 20, 31, 32, 127, 128, 2000)] == [
        0, 1, 1, 2, 2, 3, 4, 4, 5, 6, 7, 7,
    ]  # fmt: skip
    assert [band(n, 3) for n in (1, 5, 6, 11, 12)] == [0, 0, 1, 1, 2]


def test_priority_comes_before_bands_and_lower_levels_are_served_first() -> None:
    # Every band of a higher priority is below (served before) every band of a lower one.
    assert level(5, BANDS - 1) < level(4, 0)
    assert level(0, 0) < level(0, 1) < level(-1, 0)
    assert level(5, 0) == 1  # 0 is the queue's own list: other producers' messages
    assert level(-5, BANDS - 1) == LEVELS - 1 == PRIORITY_STEPS[-1]
    assert level(99, -3) == level(5, 0) and level(-99, 99) == level(-5, BANDS - 1)
