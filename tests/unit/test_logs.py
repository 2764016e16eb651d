"""Log lines for people and for machines (cairn.observe.logs): one JSON object a line
with the node's fields while it executes, an exception as a field, a bad format refused."""

from __future__ import annotations

import io
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from cairn.config import Settings
from cairn.errors import ConfigError
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage
from cairn.observe.logs import (
    CHATTY,
    JsonFormatter,
    TextFormatter,
    configure_logging,
    current_node,
    node_logging,
    retag_node,
)
from cairn.observe.sentry import node_scope

MESSAGE = NodeMessage("run-1", "checkout", 2, "charge", 0, 3, Phase.RUN)


def _record(msg: str = "hello %s", *args: Any, **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("cairn.test", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_a_line_outside_a_node_has_the_common_fields_only() -> None:
    entry = json.loads(JsonFormatter("scheduler").format(_record("hello %s", "world")))
    assert entry["message"] == "hello world"
    assert (entry["level"], entry["logger"], entry["process"]) == (
        "WARNING",
        "cairn.test",
        "scheduler",
    )
    assert entry["time"].endswith("+00:00") and "T" in entry["time"]
    assert "run_id" not in entry and "exc_info" not in entry


def test_a_line_inside_a_node_carries_its_run_node_and_attempt() -> None:
    with node_logging(MESSAGE):
        entry = json.loads(JsonFormatter("worker").format(_record()))
    assert {k: entry[k] for k in ("run_id", "workflow", "node", "iteration", "attempt")} == {
        "run_id": "run-1",
        "workflow": "checkout",
        "node": "charge",
        "iteration": 0,
        "attempt": 3,
    }
    assert entry["phase"] == "run"
    assert current_node() is None  # reset on the way out


def test_the_worker_scope_tags_lines_and_a_fused_node_retags_them() -> None:
    following = NodeMessage("run-1", "checkout", 2, "ship", 0, 1, Phase.RUN)
    with node_scope(MESSAGE):
        assert current_node() is not None and current_node()["node"] == "charge"  # type: ignore[index]
        retag_node(following)
        assert current_node()["node"] == "ship"  # type: ignore[index]
    assert current_node() is None


def test_an_exception_is_one_field_of_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "cairn.test", logging.ERROR, __file__, 1, "failed", None, sys.exc_info()
        )
    line = JsonFormatter("worker").format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert "Traceback" in entry["exc_info"] and "ValueError: boom" in entry["exc_info"]


def test_extras_are_fields_and_unserialisable_ones_become_text() -> None:
    entry = json.loads(JsonFormatter("api").format(_record(key="k", obj=object())))
    assert entry["key"] == "k" and entry["obj"].startswith("<object object")
    assert "args" not in entry and "msg" not in entry  # the record's own attributes


def test_text_lines_name_the_node_on_the_first_line_only() -> None:
    formatter = TextFormatter()
    assert "[run-1" not in formatter.format(_record())
    with node_logging(MESSAGE):
        line = formatter.format(_record())
    assert line.endswith("cairn.test: hello %s [run-1 charge#3]")


@pytest.fixture
def restored() -> Iterator[None]:
    """configure_logging changes the root logger: put it back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in CHATTY}
    formatwarning = warnings.formatwarning
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)
    logging.captureWarnings(False)
    warnings.formatwarning = formatwarning


def test_configured_json_logging_writes_json_lines(
    restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    configure_logging("INFO", "json", "worker")
    logging.getLogger("cairn.anything").info("one")
    logging.getLogger("celery.app.trace").info("Task x succeeded")  # per-task noise
    logging.getLogger("celery.app.trace").error("Task x raised unexpected")
    with warnings.catch_warnings():  # shown, not turned into an error by the test run
        warnings.simplefilter("always")
        warnings.warn("two\n  lines", UserWarning, stacklevel=1)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == [
        "one",
        "Task x raised unexpected",
        "UserWarning: two lines",
    ]
    configure_logging("INFO", "json", "worker")  # again: its own handler replaced, once
    ours = [h for h in logging.getLogger().handlers if type(h).__name__ == "_Stderr"]
    assert len(ours) == 1


def test_lines_go_to_the_stderr_of_set_up_and_to_the_processs_once_that_is_closed(
    restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not to a stream swapped in later (a Celery worker's proxy logs what it is given);
    and a closed one (a test's capture) is left for the process's own stderr."""
    first, swapped, own = io.StringIO(), io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    monkeypatch.setattr("sys.__stderr__", own)
    configure_logging("INFO", "text", "api")
    monkeypatch.setattr("sys.stderr", swapped)
    logging.getLogger("cairn.anything").warning("after the swap")
    assert "after the swap" in first.getvalue() and not swapped.getvalue()
    first.close()
    logging.getLogger("cairn.anything").warning("after the close")
    assert "after the close" in own.getvalue()


def test_celery_task_lines_are_kept_when_asked_for(
    restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    configure_logging("INFO", "text", "worker", tasks=True)
    logging.getLogger("celery.worker.strategy").info("Task x received")
    assert "Task x received" in stream.getvalue()


def test_an_unknown_format_is_a_config_error() -> None:
    assert Settings.from_env({"CAIRN_LOG_FORMAT": "json"}).log_format == "json"
    assert Settings.from_env({}).log_format == "text"
    with pytest.raises(ConfigError, match="CAIRN_LOG_FORMAT"):
        Settings.from_env({"CAIRN_LOG_FORMAT": "xml"})
