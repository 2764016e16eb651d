"""The advert a running ``cairn dev`` keeps for the command line of its project."""

from __future__ import annotations

import json
from pathlib import Path

from cairn.dev import advert
from cairn.dev.advert import ADVERT_FILE


def published(tmp_path: Path) -> Path:
    home = tmp_path / ".cairn"
    home.mkdir()
    (home / "dev-api-key").write_text("k\n", encoding="utf-8")
    advert.publish(home, "http://127.0.0.1:1", "k", {"CAIRN_HOME": str(home)})
    return home


def test_a_command_in_the_project_or_below_finds_the_fleet(tmp_path: Path) -> None:
    home = published(tmp_path)
    assert (home / ADVERT_FILE).stat().st_mode & 0o077 == 0  # its owner's only
    found = advert.found(tmp_path / "a" / "b", {})
    assert found is not None and (found.url, found.key) == ("http://127.0.0.1:1", "k")
    assert advert.found(tmp_path, {"CAIRN_HOME": str(home)}) is not None
    assert "127.0.0.1" not in json.dumps(json.loads((home / ADVERT_FILE).read_text())["settings"])
    advert.withdraw(home)
    assert advert.found(tmp_path, {}) is None


def test_a_command_asking_for_another_database_is_left_to_it(tmp_path: Path) -> None:
    published(tmp_path)
    assert advert.found(tmp_path, {"CAIRN_DATABASE_URL": "postgresql://elsewhere/db"}) is None
    assert advert.found(tmp_path, {"CAIRN_HOME": str(tmp_path / "other")}) is None


def test_the_advert_of_a_fleet_killed_is_not_followed_nor_removed_by_another(
    tmp_path: Path,
) -> None:
    home = published(tmp_path)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    body = json.loads((home / ADVERT_FILE).read_text(encoding="utf-8"))
    (home / ADVERT_FILE).write_text(json.dumps({**body, "pid": pid_max + 1}), encoding="utf-8")
    assert advert.found(tmp_path, {}) is None  # no such process
    advert.withdraw(home)  # not this process's advert: left alone
    assert (home / ADVERT_FILE).exists()
    (home / ADVERT_FILE).write_text("{not json", encoding="utf-8")
    assert advert.found(tmp_path, {}) is None
