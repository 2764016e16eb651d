"""`cairn probe worker`: judging a worker by the liveness file its pings keep fresh."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cairn.cli.processes  # noqa: F401 - registers the probe command
from cairn.cli.main import app
from cairn.config import Settings
from cairn.errors import ConfigError
from cairn.workers.liveness import check, default_max_age


def write(path: Path, alive_at: float, reason: str = "ping consumed") -> Path:
    record = {"alive_at": alive_at, "reason": reason, "node": "celery@w1", "pid": 7}
    path.write_text(json.dumps(record))
    return path


def test_a_fresh_file_is_live(tmp_path: Path) -> None:
    verdict = check(write(tmp_path / "w.alive", 100.0), max_age_s=30, now=110.0)
    assert verdict.live
    assert verdict.message == "live: worker celery@w1 (pid 7), ping consumed 10.0 s ago"


def test_a_stale_file_is_deaf(tmp_path: Path) -> None:
    verdict = check(write(tmp_path / "w.alive", 100.0), max_age_s=30, now=131.0)
    assert not verdict.live
    assert verdict.message.startswith("deaf: worker celery@w1 (pid 7) has not consumed its own")
    assert "31.0 s (max 30 s)" in verdict.message


@pytest.mark.parametrize("content", ["", "{", "[]", '{"alive_at": "soon"}', '{"alive_at": NaN}'])
def test_a_broken_file_is_not_live(tmp_path: Path, content: str) -> None:
    path = tmp_path / "w.alive"
    path.write_text(content)
    assert not check(path, max_age_s=30).live


def test_no_file_is_not_live(tmp_path: Path) -> None:
    verdict = check(tmp_path / "missing.alive", max_age_s=30)
    assert not verdict.live
    assert "not consumed its first ping yet" in verdict.message


def test_the_default_max_age_is_three_intervals() -> None:
    assert default_max_age(Settings(liveness_interval=2.5)) == 7.5


def test_the_liveness_and_metrics_settings_are_validated() -> None:
    settings = Settings.from_env(
        {
            "CAIRN_LIVENESS_INTERVAL": "0.5",
            "CAIRN_LIVENESS_FILE": "/run/cairn/alive",
            "CAIRN_METRICS_PORT": "9100",
        }
    )
    assert settings.liveness_interval == 0.5
    assert settings.liveness_file == Path("/run/cairn/alive")
    assert settings.metrics_port == 9100
    for bad in ({"CAIRN_LIVENESS_INTERVAL": "0"}, {"CAIRN_METRICS_PORT": "70000"}):
        with pytest.raises(ConfigError):
            Settings.from_env(bad)


def test_the_probe_command_exits_0_live_and_1_deaf(tmp_path: Path) -> None:
    runner = CliRunner()
    # None unsets: this process's CAIRN_* (CAIRN_TEST_REDIS, say) are no settings
    clean: dict[str, str | None] = {key: None for key in os.environ if key.startswith("CAIRN_")}
    path = write(tmp_path / "w.alive", time.time())
    command = ["probe", "worker", "--file", str(path), "--max-age", "30"]
    live = runner.invoke(app, command, env=clean)
    assert live.exit_code == 0, live.output
    assert "live: worker celery@w1" in live.output

    write(path, time.time() - 60)
    env = {**clean, "CAIRN_LIVENESS_FILE": str(path), "CAIRN_LIVENESS_INTERVAL": "10"}
    deaf = runner.invoke(app, ["probe", "worker"], env=env)  # file and max age from settings
    assert deaf.exit_code == 1, deaf.output
    assert "deaf: worker celery@w1" in deaf.output
    assert "(max 30 s)" in deaf.output
