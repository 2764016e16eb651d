"""``cairn``'s public names: each one listed is exported and resolves. (What a handler
module imports to annotate with loads none of the engine's dependencies, in a fresh
interpreter: tests/integration/test_import_hygiene.py.)"""

from __future__ import annotations

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
