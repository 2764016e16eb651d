"""API keys into principals: bootstrap keys from CAIRN_API_KEYS and the key file; minted
keys read from the store (SQLite here; PostgreSQL in tests/integration/test_access.py),
revoked, rotated and expired; a bearer header taken exactly as sent."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta
from pathlib import Path

import pytest

from cairn.access import Authenticator, KeyManager, Unauthorized
from cairn.access.authenticate import ConfigKeys, config_key_name
from cairn.access.keys import KeyNotFound, PrincipalExists
from cairn.access.local import db_principal
from cairn.config import Settings
from cairn.errors import ConfigError, InvalidInput
from cairn.model.principals import ROLE_PERMISSIONS, Permission, PrincipalKind, Role
from cairn.store.sql import Store

KEY_A = "a" * 20
KEY_B = "b" * 20


def test_keys_from_the_variable_and_the_file(tmp_path: Path, store: Store) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# rotated monthly\n\nbeta:{KEY_B}\n")
    settings = Settings.from_env(
        {"CAIRN_API_KEYS": f"alpha:{KEY_A}", "CAIRN_API_KEYS_FILE": str(keys_file)}
    )
    doors = Authenticator.from_settings(store, settings)
    assert len(doors.config) == 2
    alpha = doors.principal(f"Bearer {KEY_A}")
    assert (alpha.namespace, alpha.role, alpha.payloads) == ("alpha", Role.ADMIN, True)
    assert alpha.actor == f"key:{config_key_name(KEY_A)}" and KEY_A not in alpha.actor
    assert doors.principal(f"bearer  {KEY_B}").namespace == "beta"  # RFC 7235: 1*SP
    assert KEY_A not in str(settings.describe())  # `cairn config` masks the keys


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        f"Basic {KEY_A}",
        f"Bearer {KEY_A}x",
        f"Bearer {KEY_A[:-1]}",
        f"Bearer {KEY_A}\u00a0",  # a no-break space after it: another key
        f"Bearer {KEY_A}\u0085",  # NEL
        f"Bearer \u00a0{KEY_A}",
        f"Bearer {KEY_A} ",
        f"Bearer\t{KEY_A}",
    ],
)
def test_no_key_a_wrong_one_or_one_padded_is_unauthorized(header: str | None, store: Store) -> None:
    doors = Authenticator(store, ConfigKeys.parse([(f"alpha:{KEY_A}", "test")]))
    with pytest.raises(Unauthorized):
        doors.principal(header)


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
        ConfigKeys.parse([(line, "CAIRN_API_KEYS")])
    assert "short" not in str(refused.value).replace("shorter", "")


def test_one_key_for_two_namespaces_is_refused() -> None:
    with pytest.raises(ConfigError, match="two namespaces"):
        ConfigKeys.parse([(f"alpha:{KEY_A}", "x"), (f"beta:{KEY_A}", "x")])


def test_an_unreadable_key_file_is_a_config_error(tmp_path: Path) -> None:
    settings = Settings.from_env({"CAIRN_API_KEYS_FILE": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="CAIRN_API_KEYS_FILE"):
        ConfigKeys.from_settings(settings)


def test_a_minted_key_is_its_principal_until_revoked(store: Store) -> None:
    keys = KeyManager(store)
    made = keys.create_principal(
        "alpha", "ci-bot", Role.OPERATOR, payloads=False, by=db_principal()
    )
    assert made.created_by.startswith("db:")
    with pytest.raises(PrincipalExists):
        keys.create_principal("alpha", "ci-bot", Role.VIEWER, payloads=False, by=db_principal())
    minted = keys.mint("alpha", "ci-bot")
    doors = Authenticator(store, ConfigKeys(()), cache_s=0.0)
    who = doors.principal(f"Bearer {minted.key}")
    assert (who.name, who.namespace, who.role, who.kind) == (
        "ci-bot",
        "alpha",
        Role.OPERATOR,
        PrincipalKind.KEY,
    )
    assert who.actor == "key:ci-bot" and who.key_id == minted.key_id
    with store.reading() as tx:
        stored = tx.key(minted.key_id)
    assert stored is not None and minted.key.split("_")[-1].encode() not in stored.digest
    wrong = minted.key[:-1] + ("A" if minted.key[-1] != "A" else "B")
    with pytest.raises(Unauthorized):
        doors.principal(f"Bearer {wrong}")
    keys.revoke("alpha", minted.key_id)
    with pytest.raises(Unauthorized):
        doors.principal(f"Bearer {minted.key}")
    with pytest.raises(KeyNotFound):
        keys.revoke("alpha", minted.key_id)  # revoked already
    with pytest.raises(KeyNotFound):
        keys.revoke("beta", keys.mint("alpha", "ci-bot").key_id)  # not beta's


def test_a_rotated_key_works_for_its_grace_and_an_expired_one_not_at_all(store: Store) -> None:
    keys = KeyManager(store)
    keys.create_principal("alpha", "svc", Role.VIEWER, payloads=True, by=db_principal())
    old = keys.mint("alpha", "svc")
    later = [0.0]
    doors = Authenticator(store, ConfigKeys(()), cache_s=0.0, clock=lambda: time.time() + later[0])
    new = keys.rotate("alpha", old.key_id, grace=timedelta(minutes=10))
    assert doors.principal(f"Bearer {old.key}").name == "svc"  # within its grace
    assert doors.principal(f"Bearer {new.key}").payloads is True
    brief = keys.mint("alpha", "svc", expires_in=timedelta(minutes=1))
    assert doors.principal(f"Bearer {brief.key}").name == "svc"
    later[0] = 120.0  # two minutes on: past the brief key's expiry, within the grace
    assert doors.principal(f"Bearer {old.key}").name == "svc"
    with pytest.raises(Unauthorized):
        doors.principal(f"Bearer {brief.key}")
    later[0] = 601.0  # past the grace
    with pytest.raises(Unauthorized):
        doors.principal(f"Bearer {old.key}")
    assert doors.principal(f"Bearer {new.key}").name == "svc"


def test_a_bad_principal_name_is_refused(store: Store) -> None:
    for name in ("", "a b", "-lead", "x" * 201, "semi;colon"):
        with pytest.raises(InvalidInput):
            KeyManager(store).create_principal(
                "alpha", name, Role.VIEWER, payloads=False, by=db_principal()
            )


def test_roles_are_nested_and_payloads_is_a_permission_of_its_own() -> None:
    order = [Role.VIEWER, Role.APPROVER, Role.OPERATOR, Role.ADMIN]
    for lower, higher in itertools.pairwise(order):
        assert ROLE_PERMISSIONS[lower] < ROLE_PERMISSIONS[higher]
    assert all(Permission.PAYLOADS not in granted for granted in ROLE_PERMISSIONS.values())
