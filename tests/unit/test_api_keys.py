"""API keys: parsing CAIRN_API_KEYS and the key file, and checking a bearer header."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.api.auth import ApiKeys, Unauthorized
from cairn.config import Settings
from cairn.errors import ConfigError

KEY_A = "a" * 20
KEY_B = "b" * 20


def test_keys_from_the_variable_and_the_file(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# rotated monthly\n\nbeta:{KEY_B}\n")
    settings = Settings.from_env(
        {"CAIRN_API_KEYS": f"alpha:{KEY_A}", "CAIRN_API_KEYS_FILE": str(keys_file)}
    )
    keys = ApiKeys.from_settings(settings)
    assert len(keys) == 2
    assert keys.namespace_of(f"Bearer {KEY_A}") == "alpha"
    assert keys.namespace_of(f"bearer  {KEY_B}") == "beta"
    assert KEY_A not in str(settings.describe())  # `cairn config` masks the keys


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", f"Basic {KEY_A}", f"Bearer {KEY_A}x", f"Bearer {KEY_A[:-1]}"]
)
def test_no_key_or_a_wrong_one_is_unauthorized(header: str | None) -> None:
    keys = ApiKeys.parse([(f"alpha:{KEY_A}", "test")])
    with pytest.raises(Unauthorized):
        keys.namespace_of(header)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("alpha", "namespace:key"),
        ("alpha:", "namespace:key"),
        (f"al pha:{KEY_A}", "not a valid namespace"),
        ("alpha:short", "shorter than 16"),
    ],
)
def test_bad_entries_are_refused_without_echoing_the_key(line: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as refused:
        ApiKeys.parse([(line, "CAIRN_API_KEYS")])
    assert "short" not in str(refused.value).replace("shorter", "")


def test_one_key_for_two_namespaces_is_refused() -> None:
    with pytest.raises(ConfigError, match="two namespaces"):
        ApiKeys.parse([(f"alpha:{KEY_A}", "x"), (f"beta:{KEY_A}", "x")])


def test_an_unreadable_key_file_is_a_config_error(tmp_path: Path) -> None:
    settings = Settings.from_env({"CAIRN_API_KEYS_FILE": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="CAIRN_API_KEYS_FILE"):
        ApiKeys.from_settings(settings)
