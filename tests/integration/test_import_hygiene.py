"""What importing the pure parts costs: the decider, the model and the definition
language load no database driver, broker, cache or error tracker (import-linter checks the
static imports; this checks what a fresh interpreter really loads, lazy ones included).
Also what a handler module annotating with cairn's names loads, and the failure
classifier. Each test starts a fresh interpreter."""

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


def test_classification_imports_no_driver() -> None:
    """The effects ledger and the runner import it: recognising psycopg's or redis's
    errors must not cost importing them (a process that never did has none to see)."""
    code = (
        "import sys; sys.modules['cairn'] = type(sys)('cairn'); sys.modules['cairn'].__path__ "
        "= [sys.argv[1]]; import cairn.model.classify as c; "
        "print(sorted(m for m in ('psycopg', 'sqlalchemy', 'redis', 'tenacity') "
        "if m in sys.modules)); print(c.classify(TimeoutError()).value)"
    )
    import cairn as package  # noqa: PLC0415

    done = subprocess.run(
        [sys.executable, "-c", code, package.__path__[0]],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["[]", "transient"]
