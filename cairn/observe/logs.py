"""Logs for people and for machines: one setup for every cairn process.

``CAIRN_LOG_FORMAT=text`` (the default) writes a line people read; ``json`` writes one
JSON object a line — time (ISO 8601, UTC), level, logger, message, the process's role
and pid, and, for a line logged while a node executes, its ``run_id``, ``workflow``,
``node``, ``iteration``, ``attempt`` and ``phase`` — so a log pipeline can filter a run's
lines without parsing prose. An exception is the ``exc_info`` field, never lines of its
own: one event stays one line.

The node's fields come from a context variable the worker sets around an execution
(:func:`node_logging`), so every logger — cairn's, a handler's own, a library's — gets
them without being handed anything. An async handler's tasks copy the context, and so
keep them.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

from cairn.model.messages import NodeMessage

# Celery's lines for every task it receives and finishes: noise for people, a line a
# node on top of cairn's own. Shown with CAIRN_LOG_TASKS, or from DEBUG on.
CHATTY: Final = ("celery.worker.strategy", "celery.app.trace")

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_node: ContextVar[Mapping[str, Any] | None] = ContextVar("cairn_log_node", default=None)
# The attributes every LogRecord has: anything else on a record was passed as ``extra``.
_STANDARD: Final = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's coloured copy of the message
}


@contextmanager
def node_logging(message: NodeMessage) -> Iterator[None]:
    """Tag every line logged inside with the node execution ``message`` starts."""
    token = _node.set(_fields(message))
    try:
        yield
    finally:
        _node.reset(token)


def retag_node(message: NodeMessage) -> None:
    """Inside :func:`node_logging`, tag what follows with another node: the next one of a
    fused chain, run in the same delivery. The enclosing block's end still resets."""
    _node.set(_fields(message))


def _fields(message: NodeMessage) -> Mapping[str, Any]:
    return {
        "run_id": message.run_id,
        "workflow": message.workflow,
        "node": message.node,
        "iteration": message.iteration,
        "attempt": message.attempt,
        "phase": message.phase.value,
    }


def current_node() -> Mapping[str, Any] | None:
    """The fields of the node executing in this context, if any."""
    return _node.get()


class JsonFormatter(logging.Formatter):
    """A record as one JSON object on one line."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": self.role,
            "pid": record.process,
        }
        node = _node.get()
        if node is not None:
            entry.update(node)
        for name, value in record.__dict__.items():  # ``extra``, and a LoggerAdapter's
            if name not in _STANDARD and name not in entry:
                entry[name] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        # default=str: an extra that JSON has no type for must not lose the line.
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The line people read, with the node it is about when one is executing."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        node = _node.get()
        if node is None:
            return line
        head, _, rest = line.partition("\n")  # the tag goes on the line, not the traceback
        tag = f" [{node['run_id']} {node['node']}#{node['attempt']}]"
        return head + tag + (f"\n{rest}" if rest else "")


def formatter(log_format: str, role: str) -> logging.Formatter:
    """The formatter of ``CAIRN_LOG_FORMAT`` (validated by the settings)."""
    if log_format == "json":
        return JsonFormatter(role)
    return TextFormatter()


def _one_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    """A warning as one line, without the source line it came from: Celery's about a
    worker run as root is nine lines otherwise."""
    return f"{category.__name__}: {' '.join(str(message).split())}"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to stderr as it was at set-up — not to whatever ``sys.stderr`` is later: a
    Celery worker swaps it for a proxy that logs what is written to it, which would loop
    — and, once that stream has been closed (a test's capture, an in-process command's),
    to the process's own stderr instead of failing every line."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self.stream, "closed", False):
            self.stream = sys.__stderr__
        super().emit(record)


def configure_logging(level: str, log_format: str, role: str, *, tasks: bool = False) -> None:
    """Send every logger's lines to stderr in ``log_format``, at ``level`` — once per
    process, and again harmlessly (a forked child keeps its parent's setup; a second
    call replaces the first's handler, not another's); Celery's line per task only if
    ``tasks``, or at DEBUG."""
    handler = _Stderr()
    handler.setFormatter(formatter(log_format, role))
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _Stderr):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    chatty = logging.NOTSET if tasks or level == "DEBUG" else logging.WARNING
    for name in CHATTY:
        logging.getLogger(name).setLevel(chatty)
    # A warning is a line, in the same format. Released first: capturing again is a no-op
    # that trusts warnings.showwarning to be still logging's, which whoever restored
    # the warnings module since (a test framework, catch_warnings) made untrue.
    logging.captureWarnings(False)
    logging.captureWarnings(True)
    warnings.formatwarning = _one_line
