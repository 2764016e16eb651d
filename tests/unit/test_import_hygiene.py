"""What importing the pure parts costs: the decider, the model and the definition
language load no database driver, broker, cache or error tracker (import-linter checks the
static imports; this checks what a fresh interpreter really loads, lazy ones included)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

IO = ["celery", "kombu", "sqlalchemy", "psycopg", "redis", "sentry_sdk", "httpx", "boto3"]


def _loaded(module: str) -> list[str]:
    code = (
        f"import json, sys, {module}\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return list(json.loads(found.stdout))


@pytest.mark.parametrize(
    "module", ["cairn", "cairn.model", "cairn.decider", "cairn.definitions.loader"]
)
def test_the_pure_parts_import_no_io(module: str) -> None:
    assert sorted(set(IO) & set(_loaded(module))) == []


def test_the_public_names_resolve_when_used() -> None:
    code = (
        "import sys, cairn\n"
        "assert 'cairn.client' not in sys.modules\n"
        "from cairn import Workflow, decide, TransientError\n"
        "assert 'celery' not in sys.modules\n"
        "print(cairn.Client.__module__)"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert found.stdout.strip() == "cairn.client"
