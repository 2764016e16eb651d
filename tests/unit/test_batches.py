"""Submitting in batches on the embedded default: the size limit. Per-item answers,
request ids taken before or within the batch, and the runs really starting:
tests/embedded/test_batches.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.engine.batches import MAX_BATCH, SubmitItem
from cairn.errors import InvalidInput
from cairn.runtime import Runtime
from tests.support.embedded import settings


def test_a_batch_has_a_size_limit(tmp_path: Path) -> None:
    runtime = Runtime.build(settings(tmp_path))
    try:
        with pytest.raises(InvalidInput, match="at most 1000"):
            runtime.orchestrator.submit_batch([SubmitItem("chain10")] * (MAX_BATCH + 1))
    finally:
        runtime.close()
