"""`cairn demo` on a machine with no services: crash, resume, every finished step once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from cairn.demo.skill import STEPS

ROOT = Path(__file__).resolve().parents[2]


def test_demo_kills_its_worker_and_resumes_without_rerunning_finished_steps(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cairn.cli",
            "demo",
            "--home",
            str(tmp_path),
            "--pace",
            "0.3",
            "--kill-at",
            "draft",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "run succeeded" in result.stdout
    executions = Counter(
        line.split()[0] for line in (tmp_path / "executions.log").read_text().splitlines()
    )
    assert executions["draft"] == 2  # in flight when the worker was killed
    assert {step: executions[step] for step in STEPS if step != "draft"} == {
        step: 1 for step in STEPS if step != "draft"
    }
    assert "skipped: its result was already recorded" in result.stdout
