"""`make flower` on an install without the flower extra says, in one line, what to run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.services import ROOT


def test_make_flower_names_the_extra_it_needs_when_flower_is_missing(tmp_path: Path) -> None:
    # A flower package that cannot be imported, first on the path: Flower "not installed".
    (tmp_path / "flower").mkdir()
    (tmp_path / "flower" / "__init__.py").write_text('raise ImportError("not installed")\n')
    env = {**os.environ, "CAIRN_BROKER_URL": "redis://127.0.0.1:1/0", "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        ["make", "-s", "flower", f"PYTHON={sys.executable}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        'make flower: Flower is not installed: pip install -e ".[flower]"'
    )
