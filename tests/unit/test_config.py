"""Settings from CAIRN_* variables: defaults, parsing, refusal of unknowns, masking."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cairn import CairnError, ConfigError, Settings
from cairn.config import ENV_PREFIX


@pytest.fixture(autouse=True)
def no_cairn_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever CAIRN_* variables the test process inherited must not leak into a test."""
    for key in list(os.environ):
        if key.startswith(ENV_PREFIX):
            monkeypatch.delenv(key)


# -- defaults ------------------------------------------------------------------------------


def test_defaults_are_embedded_sqlite_under_home() -> None:
    settings = Settings.from_env({})
    assert settings.home == Path.home() / ".cairn"
    assert settings.database_url is None
    assert settings.redis_url is None
    assert settings.broker_url is None
    assert settings.workflows == []
    assert settings.log_level == "INFO"
    assert settings.embedded is True
    assert settings.effective_database_url == f"sqlite:///{Path.home() / '.cairn' / 'cairn.db'}"


def test_from_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_LOG_LEVEL", "warning")
    assert Settings.from_env().log_level == "WARNING"


def test_home_moves_the_sqlite_file(tmp_path: Path) -> None:
    settings = Settings.from_env({"CAIRN_HOME": str(tmp_path)})
    assert settings.home == tmp_path
    assert settings.effective_database_url == f"sqlite:///{tmp_path / 'cairn.db'}"
    assert settings.embedded is True


def test_database_url_is_used_as_is_and_is_not_embedded() -> None:
    url = "postgresql://cairn@db:5432/cairn"
    settings = Settings.from_env({"CAIRN_DATABASE_URL": url})
    assert settings.database_url == url
    assert settings.effective_database_url == url
    assert settings.embedded is False


def test_broker_url_is_not_embedded() -> None:
    settings = Settings.from_env({"CAIRN_BROKER_URL": "redis://broker:6379/1"})
    assert settings.broker_url == "redis://broker:6379/1"
    assert settings.embedded is False


def test_explicit_environ_is_the_only_source(monkeypatch: pytest.MonkeyPatch) -> None:
    # from_env(environ) reads the mapping it is given; the process environment must not
    # creep in behind it (tests, and callers that build settings for another process).
    monkeypatch.setenv("CAIRN_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("CAIRN_DATABASE_URL", "postgresql://leaked@db/cairn")
    settings = Settings.from_env({})
    assert settings.log_level == "INFO"
    assert settings.database_url is None


def test_settings_are_frozen() -> None:
    settings = Settings.from_env({})
    with pytest.raises(Exception, match="frozen"):
        settings.log_level = "DEBUG"  # type: ignore[misc]


# -- CAIRN_WORKFLOWS ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("examples/book_flight.yaml", ["examples/book_flight.yaml"]),
        (
            "examples/book_flight.yaml,examples/,examples.weekly_report",
            ["examples/book_flight.yaml", "examples/", "examples.weekly_report"],
        ),
        (" a.yaml , b.json ,, c ,", ["a.yaml", "b.json", "c"]),
        ("", []),
        (" , ", []),
    ],
)
def test_workflows_are_comma_separated(raw: str, expected: list[str]) -> None:
    assert Settings.from_env({"CAIRN_WORKFLOWS": raw}).workflows == expected


def test_workflows_is_not_parsed_as_json() -> None:
    raw = '["a.yaml"]'
    assert Settings.from_env({"CAIRN_WORKFLOWS": raw}).workflows == [raw]


# -- log level ---------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["debug", "Info", "WARNING", "error", "critical"])
def test_log_level_is_normalised(level: str) -> None:
    assert Settings.from_env({"CAIRN_LOG_LEVEL": level}).log_level == level.upper()


@pytest.mark.parametrize("level", ["verbose", "", "WARN ", "10"])
def test_bad_log_level_is_a_config_error(level: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"CAIRN_LOG_LEVEL": level})
    message = str(caught.value)
    assert message.startswith("invalid settings:")
    assert "CAIRN_LOG_LEVEL" in message
    assert repr(level) in message
    assert caught.value.code == "config_error"
    assert isinstance(caught.value, CairnError)
    assert caught.value.to_dict() == {"code": "config_error", "message": message}


# -- unknown variables -------------------------------------------------------------------


def test_unknown_variable_suggests_the_close_one() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"CAIRN_DATABSE_URL": "postgresql://db/cairn"})
    message = str(caught.value)
    assert "CAIRN_DATABSE_URL (did you mean CAIRN_DATABASE_URL?)" in message
    known = message.split("known: ", 1)[1].split(", ")
    assert {"CAIRN_BROKER_URL", "CAIRN_DATABASE_URL", "CAIRN_HOME", "CAIRN_LEASE_TTL"} <= set(known)
    assert known == sorted(known)


def test_unknown_variable_is_refused_even_next_to_good_ones() -> None:
    environ = {"CAIRN_LOG_LEVEL": "DEBUG", "CAIRN_LOG_LEVL": "DEBUG"}
    with pytest.raises(ConfigError, match=r"did you mean CAIRN_LOG_LEVEL\?"):
        Settings.from_env(environ)


def test_the_test_suites_own_variables_are_no_settings() -> None:
    environ = {"CAIRN_TEST_REQUIRE_SERVICES": "1", "CAIRN_TEST_REDIS": "redis://x"}
    assert Settings.from_env({**environ, "CAIRN_LOG_LEVEL": "DEBUG"}).log_level == "DEBUG"


def test_every_unknown_variable_is_listed() -> None:
    environ = {
        "CAIRN_REDIS_ULR": "redis://x",
        "CAIRN_TOTALLY_UNRELATED_OPTION": "1",
        "CAIRN_HOMEDIR": "/tmp",
    }
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(environ)
    message = str(caught.value)
    assert "CAIRN_REDIS_ULR (did you mean CAIRN_REDIS_URL?)" in message
    assert "CAIRN_HOMEDIR (did you mean CAIRN_HOME?)" in message
    assert "CAIRN_TOTALLY_UNRELATED_OPTION" in message
    assert "CAIRN_TOTALLY_UNRELATED_OPTION (did you mean" not in message


def test_other_variables_are_ignored() -> None:
    settings = Settings.from_env({"PATH": "/bin", "CAIRNX_FOO": "1", "cairn_home": "/x"})
    assert settings == Settings.from_env({})


# -- describe() masks passwords ------------------------------------------------------------


def test_describe_has_every_setting_and_the_effective_url(tmp_path: Path) -> None:
    data = Settings.from_env(
        {"CAIRN_HOME": str(tmp_path), "CAIRN_WORKFLOWS": "a.yaml,b", "CAIRN_LOG_LEVEL": "debug"}
    ).describe()
    assert set(data) == set(Settings.model_fields) | {"effective_database_url"}
    assert {
        key: data[key]
        for key in (
            "home",
            "database_url",
            "redis_url",
            "broker_url",
            "workflows",
            "log_level",
            "effective_database_url",
        )
    } == {
        "home": str(tmp_path),
        "database_url": None,
        "redis_url": None,
        "broker_url": None,
        "workflows": ["a.yaml", "b"],
        "log_level": "DEBUG",
        "effective_database_url": f"sqlite:///{tmp_path / 'cairn.db'}",
    }


def test_describe_masks_passwords_in_every_url() -> None:
    settings = Settings.from_env(
        {
            "CAIRN_DATABASE_URL": "postgresql+psycopg://cairn:s3cret@db.internal:5432/cairn",
            "CAIRN_REDIS_URL": "redis://:r3dis-pw@cache:6379/0",
            "CAIRN_BROKER_URL": "amqp://guest:gu3st@rabbit:5672//",
        }
    )
    data = settings.describe()
    assert data["database_url"] == "postgresql+psycopg://cairn:***@db.internal:5432/cairn"
    assert data["effective_database_url"] == data["database_url"]
    assert data["redis_url"] == "redis://:***@cache:6379/0"
    assert data["broker_url"] == "amqp://guest:***@rabbit:5672//"
    text = repr(data)
    for secret in ("s3cret", "r3dis-pw", "gu3st"):
        assert secret not in text
    # the settings themselves keep the real values
    assert settings.database_url == "postgresql+psycopg://cairn:s3cret@db.internal:5432/cairn"


def test_describe_masks_a_password_containing_at_sign() -> None:
    data = Settings.from_env(
        {"CAIRN_DATABASE_URL": "postgresql://app:p@ss@db:5432/cairn"}
    ).describe()
    assert data["database_url"] == "postgresql://app:***@db:5432/cairn"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://cairn@db:5432/cairn",
        "postgresql://db:5432/cairn",
        "sqlite:////var/lib/cairn/cairn.db",
        "redis://cache:6379/0",
    ],
)
def test_describe_leaves_urls_without_password_alone(url: str) -> None:
    data = Settings.from_env({"CAIRN_DATABASE_URL": url, "CAIRN_REDIS_URL": url}).describe()
    assert data["database_url"] == url
    assert data["redis_url"] == url


def test_describe_keeps_the_host_when_the_query_contains_at_sign() -> None:
    url = "postgresql://app:s3cret@db.internal:5432/cairn?application_name=worker@eu"
    data = Settings.from_env({"CAIRN_DATABASE_URL": url}).describe()
    assert "s3cret" not in data["database_url"]
    assert data["database_url"] == (
        "postgresql://app:***@db.internal:5432/cairn?application_name=worker@eu"
    )


def test_every_setting_has_its_row_in_the_configuration_page_and_no_row_is_stale() -> None:
    """docs/configuration.md's table is where people look a variable up."""

    page = Path(__file__).parents[2] / "docs" / "configuration.md"
    rows = set(re.findall(r"^\| `(CAIRN_[A-Z0-9_]+)`", page.read_text(encoding="utf-8"), re.M))
    assert rows == {ENV_PREFIX + name.upper() for name in Settings.model_fields}


def test_worker_threads_are_a_setting_with_bounds() -> None:
    assert Settings.from_env({}).worker_threads == 2
    assert Settings.from_env({"CAIRN_WORKER_THREADS": "8"}).worker_threads == 8
    with pytest.raises(ConfigError, match="CAIRN_WORKER_THREADS"):
        Settings.from_env({"CAIRN_WORKER_THREADS": "0"})
