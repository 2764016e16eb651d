"""Queue names: what a node's ``queue`` and ``CAIRN_QUEUES`` may say.

A queue name becomes a broker key (a Redis list, an AMQP queue) and a ``--queues``
argument on a worker's command line, so it keeps to characters every broker and shell
takes as they are, and to a length no broker truncates.
"""

from __future__ import annotations

import re

MAX_QUEUE_NAME = 64
QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def queue_name_problem(value: object) -> str | None:
    """Why ``value`` is not a queue name, or None if it is one."""
    if not isinstance(value, str) or not value:
        return f"a queue name is a non-empty string, got {value!r}"
    if len(value) > MAX_QUEUE_NAME:
        return f"queue name {value[:20]!r}... is longer than {MAX_QUEUE_NAME} characters"
    if not QUEUE_NAME.match(value):
        return (
            f"queue name {value!r} may only hold letters, digits, '_', '-' and '.', "
            "and starts with a letter or a digit"
        )
    return None
