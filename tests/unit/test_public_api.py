"""``cairn``'s public names: each one listed is exported and resolves, and what a handler
module imports to annotate with does not load the engine's dependencies."""

from __future__ import annotations

import subprocess
import sys

import cairn
from cairn.definitions.decorators import DecoratedWorkflow
from cairn.workers.context import StepContext


def test_every_public_name_is_exported_and_resolves() -> None:
    assert sorted(cairn.__all__) == sorted(cairn._EXPORTS)
    assert len(set(cairn.__all__)) == len(cairn.__all__)
    for name in cairn.__all__:
        assert getattr(cairn, name) is not None, name
    assert cairn.StepContext is StepContext
    assert isinstance(cairn.workflow("w"), DecoratedWorkflow)


def test_annotating_a_handler_module_loads_no_store_broker_or_sdk() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from cairn import Handler, JSONValue, Message, Progress, State, StepContext\n"
            "import cairn\n"
            "cairn.workflow('w')\n"
            "heavy = ('sqlalchemy', 'celery', 'redis', 'psycopg', 'openai', 'anthropic', 'httpx')\n"
            "print(' '.join(m for m in heavy if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert loaded.stdout.strip() == ""
