"""Sign-in through OpenID Connect, the parts that need no provider: the CAIRN_OIDC_*
settings (a mistake stops the process at start, saying which and why), the mapping of a
person's verified claims to a principal, and PKCE's S256."""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest

from cairn.access.oidc import (
    GroupRoles,
    LoginState,
    NoMappedGroup,
    NoUsableName,
    OidcSignIn,
    ProviderRefused,
    SeveralNamespaces,
    StateMismatch,
)
from cairn.access.oidc.flow import s256
from cairn.config import Settings
from cairn.config.oidc import GroupGrant, parse_group_roles
from cairn.errors import ConfigError
from cairn.model.principals import PrincipalKind, Role

COMPLETE = {
    "CAIRN_OIDC_ISSUER": "https://login.example.com/realms/staff",
    "CAIRN_OIDC_CLIENT_ID": "cairn",
    "CAIRN_OIDC_REDIRECT_URL": "https://cairn.example.com/console/oidc/callback",
    "CAIRN_OIDC_ROLES": "cairn-admins=admin,cairn-approvers=approver@acme",
}


# -- settings -------------------------------------------------------------------------------


def test_sign_in_is_off_by_default() -> None:
    settings = Settings.from_env({})
    assert settings.oidc_issuer is None and settings.oidc_roles == {}


def test_the_group_mapping_is_read_with_its_namespaces() -> None:
    settings = Settings.from_env({**COMPLETE, "CAIRN_OIDC_PAYLOAD_GROUPS": "cairn-admins"})
    assert settings.oidc_roles == {
        "cairn-admins": GroupGrant(role=Role.ADMIN),
        "cairn-approvers": GroupGrant(role=Role.APPROVER, namespace="acme"),
    }
    assert settings.oidc_scopes == ["openid", "email", "profile"]
    assert settings.oidc_payload_groups == ["cairn-admins"]


def test_the_client_secret_is_masked_in_what_cairn_config_shows() -> None:
    settings = Settings.from_env({**COMPLETE, "CAIRN_OIDC_CLIENT_SECRET": "very-secret-value"})
    assert "very-secret-value" not in str(settings.describe())


@pytest.mark.parametrize(
    ("mapping", "complaint"),
    [
        ("cairn-admins=adm", "the role is one of viewer, approver, operator, admin, not 'adm'"),
        ("cairn-admins", "an entry is GROUP=ROLE or GROUP=ROLE@NAMESPACE"),
        ("=admin", "an entry is GROUP=ROLE"),
        ("a=admin@", "'' is not a valid namespace name"),
        ("a=admin@no/such", "'no/such' is not a valid namespace name"),
        ("a=admin,a=viewer", "group 'a' is mapped twice"),
    ],
)
def test_a_bad_mapping_stops_the_process_at_start(mapping: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match="CAIRN_OIDC_ROLES") as caught:
        Settings.from_env({**COMPLETE, "CAIRN_OIDC_ROLES": mapping})
    assert complaint in str(caught.value)


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"CAIRN_OIDC_CLIENT_ID": None}, "CAIRN_OIDC_ISSUER needs CAIRN_OIDC_CLIENT_ID"),
        ({"CAIRN_OIDC_ROLES": ""}, "CAIRN_OIDC_ISSUER needs CAIRN_OIDC_ROLES"),
        ({"CAIRN_OIDC_REDIRECT_URL": None}, "needs CAIRN_OIDC_REDIRECT_URL"),
        ({"CAIRN_OIDC_ISSUER": "http://login.example.com"}, "HTTPS is required"),
        ({"CAIRN_OIDC_REDIRECT_URL": "http://cairn.example.com/cb"}, "HTTPS is required"),
        ({"CAIRN_OIDC_ISSUER": "login.example.com"}, "is not an absolute http(s) URL"),
        ({"CAIRN_OIDC_SCOPES": "email profile"}, "CAIRN_OIDC_SCOPES must include 'openid'"),
        ({"CAIRN_OIDC_PAYLOAD_GROUPS": "cairn-admin"}, "names ['cairn-admin'], which"),
        ({"CAIRN_OIDC_ISSUER": None}, "CAIRN_OIDC_CLIENT_ID, CAIRN_OIDC_REDIRECT_URL given"),
        ({"CAIRN_OIDC_NAMESPACE": "a b"}, "CAIRN_OIDC_NAMESPACE"),
    ],
)
def test_incomplete_or_unsafe_settings_stop_the_process_at_start(
    change: dict[str, str | None], complaint: str
) -> None:
    env = {key: value for key, value in {**COMPLETE, **change}.items() if value is not None}
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(env)
    assert complaint in str(caught.value)


def test_plain_http_is_allowed_to_this_machine_only() -> None:
    settings = Settings.from_env(
        {
            **COMPLETE,
            "CAIRN_OIDC_ISSUER": "http://127.0.0.1:8766",
            "CAIRN_OIDC_REDIRECT_URL": "http://localhost:8000/console/oidc/callback",
        }
    )
    assert settings.oidc_issuer == "http://127.0.0.1:8766"


def test_an_empty_mapping_text_maps_nothing() -> None:
    assert parse_group_roles(" , ") == {}


# -- claims to a principal ------------------------------------------------------------------

ROLES = GroupRoles(
    parse_group_roles("admins=admin,approvers=approver,viewers=viewer,acme-ops=operator@acme"),
    "default",
    frozenset({"admins"}),
)


def claims(**more: Any) -> dict[str, Any]:
    return {"sub": "s-1", "email": "Ann@Example.com", "email_verified": True, **more}


def test_the_highest_mapped_role_wins_and_payloads_follow_their_groups() -> None:
    who = ROLES.principal(claims(groups=["viewers", "unmapped", "admins", "approvers"]))
    assert (who.name, who.namespace, who.role) == ("ann@example.com", "default", Role.ADMIN)
    assert who.kind is PrincipalKind.PERSON and who.payloads
    assert not ROLES.principal(claims(groups=["approvers"])).payloads


def test_a_group_of_another_namespace_puts_the_person_there() -> None:
    who = ROLES.principal(claims(groups="acme-ops"))  # a single group may come as a string
    assert (who.namespace, who.role) == ("acme", Role.OPERATOR)


@pytest.mark.parametrize("groups", [[], ["unmapped"], None, 7, [None, 3]])
def test_no_mapped_group_gets_no_access(groups: object) -> None:
    with pytest.raises(NoMappedGroup) as refused:
        ROLES.principal(claims(groups=groups))
    assert refused.value.name == "ann@example.com"
    assert refused.value.audit_detail() == {
        "reason": "no_mapped_group",
        "message": str(refused.value),
        "subject": "s-1",
    }


def test_groups_in_two_namespaces_are_refused_rather_than_guessed() -> None:
    with pytest.raises(SeveralNamespaces, match=r"\['acme', 'default'\]"):
        ROLES.principal(claims(groups=["admins", "acme-ops"]))


@pytest.mark.parametrize(
    "change",
    [
        {"email": None},
        {"email_verified": False},
        {"email": "ann smith@example.com"},  # not a principal's name: no space
        {"email": "-ann@example.com"},
    ],
)
def test_no_usable_name_gets_no_access(change: dict[str, Any]) -> None:
    found = {k: v for k, v in claims(groups=["admins"], **change).items() if v is not None}
    with pytest.raises(NoUsableName):
        ROLES.principal(found)


def test_another_claim_may_name_the_person() -> None:
    by_username = GroupRoles(ROLES.grants, "default", name_claim="preferred_username")
    who = by_username.principal(claims(preferred_username="ann.s", groups=["viewers"]))
    assert who.actor == "person:ann.s"


def test_s256_is_rfc_7636s() -> None:
    # RFC 7636, appendix B.
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert s256(verifier) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_a_login_state_without_a_state_matches_no_callback() -> None:
    sign_in = OidcSignIn(
        issuer="https://login.example.com",
        client_id="cairn",
        client_secret=None,
        redirect_url="https://cairn.example.com/cb",
        scopes=("openid",),
        roles=ROLES,
    )
    try:
        with pytest.raises(StateMismatch):  # refused before the provider is asked anything
            sign_in.finish({"state": "", "code": "c"}, LoginState("", "n", "v", time.time()))
    finally:
        sign_in.close()


def test_a_refusal_survives_a_pickle_with_its_facts() -> None:
    refused = ProviderRefused("invalid_grant", "the code was used", at="token")
    copy = pickle.loads(pickle.dumps(refused))
    assert type(copy) is ProviderRefused and str(copy) == str(refused)
    assert copy.audit_detail() == refused.audit_detail()
    assert copy.to_dict()["reason"] == "provider_error"
