"""The installed ``cairn`` console script, as a user runs it: each test starts it as a
process (the commands themselves are tested in process in tests/unit/test_cli.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cairn.client import Client
from cairn.errors import CairnError
from tests.support import cli
from tests.support.cli import REPO_ROOT, flat
from tests.unit.test_cli import (
    BROKEN,
    BROKEN_CODES,
    TYPOS_YAML,
    clean_env,
    example_paths,
    hostile_files,
)


@pytest.fixture(autouse=True)
def at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """From the repo root with no CAIRN_* settings, as the in-process tests run."""
    cli.at_repo_root(monkeypatch)


@pytest.fixture(scope="module")
def cairn_script() -> str:
    path = shutil.which("cairn")
    assert path is not None, "the cairn console script is not installed (pip install -e .)"
    return path


def run_script(
    script: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [script, *args],
        cwd=REPO_ROOT,
        env=clean_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_console_script_validates_examples(cairn_script: str) -> None:
    result = run_script(cairn_script, "validate", *example_paths())
    assert result.returncode == 0, result.stderr
    for key in ("book_flight@1", "agent_loop@1", "weekly_report@1"):
        assert re.search(rf"^ok\s+{re.escape(key)}\s", result.stdout, re.MULTILINE), key


def test_console_script_rejects_broken(cairn_script: str) -> None:
    result = run_script(cairn_script, "validate", BROKEN)
    assert result.returncode == 2
    for code in BROKEN_CODES:
        assert f"[{code}]" in result.stderr, code


def test_console_script_answers_hostile_files_without_a_traceback(
    cairn_script: str, tmp_path: Path
) -> None:
    paths = hostile_files(tmp_path)
    result = run_script(cairn_script, "validate", *map(str, paths))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    assert f"{len(paths)} of {len(paths)} definition(s) invalid" in result.stderr


def test_console_script_config_typo(cairn_script: str) -> None:
    env = {**clean_env(), "CAIRN_DATABSE_URL": "postgresql://localhost/cairn"}
    result = run_script(cairn_script, "config", env=env)
    assert result.returncode == 2
    assert "did you mean CAIRN_DATABASE_URL?" in flat(result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_register_takes_all_or_nothing_and_names_every_fault(
    cairn_script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    typos = tmp_path / "typos.yaml"
    typos.write_text(TYPOS_YAML)
    env = {**clean_env(), "CAIRN_HOME": str(home)}
    result = run_script(cairn_script, "register", "examples/book_flight.yaml", str(typos), env=env)
    assert result.returncode == 2, result.stderr
    assert "unknown key 'retyr' (did you mean 'retry'?)" in flat(result.stderr)
    assert "unknown key 'polcy' in 'join' (did you mean 'policy'?)" in flat(result.stderr)
    assert "Traceback" not in result.stderr and "registered" not in result.stdout
    monkeypatch.setenv("CAIRN_HOME", str(home))
    client = Client()
    try:
        with pytest.raises(CairnError):  # the valid file was not registered either
            client.runtime.orchestrator.registry.get("book_flight", 1)
    finally:
        client.close()
