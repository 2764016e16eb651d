"""Sign-in through OpenID Connect against the stand-in provider, run as a subprocess
(``python -m cairn.testing.oidc_server``), with a browser played by httpx following the
redirects to a callback served here: a person's groups become their role; a forged,
replayed, crossed or stale callback and every kind of bad ID token are refused, each with
its own typed error; the refusals reach the audit log with their reason and no secret."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from cairn.access.audit import Audit
from cairn.access.oidc import (
    BadSignature,
    Begun,
    LoginExpired,
    LoginState,
    NoMappedGroup,
    NonceMismatch,
    OidcSignIn,
    ProviderRefused,
    ProviderUnavailable,
    SignInRefused,
    StateMismatch,
    TokenExpired,
    WrongAudience,
    WrongIssuer,
    record_sign_in,
)
from cairn.access.oidc.provider import JWKS_REFETCH_S
from cairn.config import Settings
from cairn.model.principals import PrincipalKind, Role
from cairn.store.backends import store_for
from cairn.store.database import make_engine
from cairn.testing.oidc_server import OidcServer
from tests.support.oidc import fault, running_provider

SECRET = "s3cret-of-the-client"
USERS = {
    "alice": {"groups": ["cairn-approvers"], "email": "Alice@Example.test"},
    "ada": {"groups": ["cairn-viewers", "cairn-admins"], "email": "ada@example.test"},
    "otto": {"groups": ["acme-operators", "marketing"], "email": "otto@example.test"},
    "nobody": {"groups": ["marketing"], "email": "nobody@example.test"},
}
ROLES = (
    "cairn-admins=admin,cairn-approvers=approver,cairn-viewers=viewer,acme-operators=operator@acme"
)


class _Callback(BaseHTTPRequestHandler):
    """The console's callback, as far as the browser can tell: it lands, and stops."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def callback_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Callback)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/console/oidc/callback"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def issuer(callback_url: str) -> Iterator[str]:
    with running_provider(callback_url, client_secret=SECRET, users=USERS) as found:
        yield found


def settings_for(issuer: str, callback_url: str, **more: str) -> Settings:
    return Settings.from_env(
        {
            "CAIRN_OIDC_ISSUER": issuer,
            "CAIRN_OIDC_CLIENT_ID": "cairn",
            "CAIRN_OIDC_CLIENT_SECRET": SECRET,
            "CAIRN_OIDC_REDIRECT_URL": callback_url,
            "CAIRN_OIDC_SCOPES": "openid email groups",
            "CAIRN_OIDC_ROLES": ROLES,
            "CAIRN_OIDC_PAYLOAD_GROUPS": "cairn-admins",
            **more,
        }
    )


@pytest.fixture
def sign_in(issuer: str, callback_url: str) -> Iterator[OidcSignIn]:
    found = OidcSignIn.from_settings(settings_for(issuer, callback_url))
    assert found is not None
    yield found
    found.close()


@pytest.fixture
def browser() -> Iterator[httpx.Client]:
    with httpx.Client(follow_redirects=True, timeout=10) as client:
        yield client


class _Form(HTMLParser):
    """The login page's form: where it posts, and its fields."""

    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "form":
            self.action = found.get("action") or ""
        elif tag == "input" and found.get("name"):
            self.fields[str(found["name"])] = found.get("value") or ""


def through_form(browser: httpx.Client, begun: Begun, user: str) -> dict[str, str]:
    """The person picks ``user`` on the provider's login page; the query the browser
    comes back to the callback with."""
    page = browser.get(begun.url)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    form = _Form()
    form.feed(page.text)
    landed = browser.post(page.url.join(form.action), data={**form.fields, "username": user})
    assert landed.status_code == 200
    return dict(landed.url.params)


def come_back(
    sign_in: OidcSignIn, browser: httpx.Client, user: str
) -> tuple[Begun, dict[str, str]]:
    """A login begun for ``user`` (named to the provider by login_hint): the kept state, and
    the callback's query."""
    begun = sign_in.begin(login_hint=user)
    landed = browser.get(begun.url)
    assert landed.status_code == 200
    assert landed.url.path == "/console/oidc/callback"
    return begun, dict(landed.url.params)


# -- who comes back as what -----------------------------------------------------------------


def test_an_approver_signs_in_through_the_login_form(
    sign_in: OidcSignIn, browser: httpx.Client, issuer: str
) -> None:
    begun = sign_in.begin()
    query = through_form(browser, begun, "alice")
    assert set(query) == {"code", "state", "iss"} and query["iss"] == issuer
    signed_in = sign_in.finish(query, begun.login)
    who = signed_in.principal
    assert (who.name, who.namespace, who.role) == ("alice@example.test", "default", Role.APPROVER)
    assert who.kind is PrincipalKind.PERSON and who.actor == "person:alice@example.test"
    assert not who.payloads
    assert signed_in.subject == "sub-alice" and signed_in.issuer == issuer
    assert signed_in.expires_at > time.time()


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("ada", (Role.ADMIN, "default", True)),  # admins and viewers: the highest wins
        ("otto", (Role.OPERATOR, "acme", False)),  # a group mapped into another namespace
    ],
)
def test_groups_map_to_the_highest_role_in_their_namespace(
    sign_in: OidcSignIn, browser: httpx.Client, user: str, expected: tuple[Role, str, bool]
) -> None:
    begun, query = come_back(sign_in, browser, user)
    who = sign_in.finish(query, begun.login).principal
    assert (who.role, who.namespace, who.payloads) == expected


def test_a_person_in_no_mapped_group_is_refused(sign_in: OidcSignIn, browser: httpx.Client) -> None:
    begun, query = come_back(sign_in, browser, "nobody")
    with pytest.raises(NoMappedGroup) as refused:
        sign_in.finish(query, begun.login)
    assert refused.value.name == "nobody@example.test"
    assert refused.value.audit_detail()["subject"] == "sub-nobody"


def test_a_person_the_provider_does_not_know_comes_back_refused(
    sign_in: OidcSignIn, browser: httpx.Client
) -> None:
    begun = sign_in.begin()
    query = through_form(browser, begun, "mallory")
    with pytest.raises(ProviderRefused) as refused:
        sign_in.finish(query, begun.login)
    assert (refused.value.error, refused.value.at) == ("access_denied", "authorization")


# -- callbacks that are not this login's ----------------------------------------------------


def test_a_replayed_code_is_refused(sign_in: OidcSignIn, browser: httpx.Client) -> None:
    begun, query = come_back(sign_in, browser, "alice")
    sign_in.finish(query, begun.login)
    with pytest.raises(ProviderRefused) as refused:
        sign_in.finish(query, begun.login)
    assert (refused.value.error, refused.value.at) == ("invalid_grant", "token")
    assert "used" in refused.value.description


def test_a_wrong_state_is_refused_before_the_code_is_spent(
    sign_in: OidcSignIn, browser: httpx.Client
) -> None:
    begun, query = come_back(sign_in, browser, "alice")
    other = sign_in.begin().login  # another login's state: a crossed or forged callback
    with pytest.raises(StateMismatch):
        sign_in.finish(query, other)
    with pytest.raises(StateMismatch):
        sign_in.finish({**query, "state": ""}, begun.login)
    # The code was never sent anywhere: the right login still signs in with it.
    assert sign_in.finish(query, begun.login).principal.role is Role.APPROVER


def test_a_wrong_pkce_verifier_is_refused(sign_in: OidcSignIn, browser: httpx.Client) -> None:
    begun, query = come_back(sign_in, browser, "alice")
    stolen = replace(begun.login, code_verifier=sign_in.begin().login.code_verifier)
    with pytest.raises(ProviderRefused) as refused:
        sign_in.finish(query, stolen)
    assert refused.value.error == "invalid_grant" and "PKCE" in refused.value.description


def test_a_callback_naming_another_issuer_is_refused(
    sign_in: OidcSignIn, browser: httpx.Client
) -> None:
    """RFC 9207: a mix-up attack brings the browser back with another provider's code."""
    begun, query = come_back(sign_in, browser, "alice")
    with pytest.raises(WrongIssuer):
        sign_in.finish({**query, "iss": "https://elsewhere.example.test"}, begun.login)


def test_a_login_begun_too_long_ago_is_refused(sign_in: OidcSignIn, browser: httpx.Client) -> None:
    begun, query = come_back(sign_in, browser, "alice")
    sign_in.clock = lambda: time.time() + 601
    with pytest.raises(LoginExpired):
        sign_in.finish(query, begun.login)


def test_a_wrong_client_secret_is_refused_by_the_provider(
    issuer: str, callback_url: str, browser: httpx.Client
) -> None:
    sign_in = OidcSignIn.from_settings(
        settings_for(issuer, callback_url, CAIRN_OIDC_CLIENT_SECRET="not-the-secret")
    )
    assert sign_in is not None
    begun, query = come_back(sign_in, browser, "alice")
    with pytest.raises(ProviderRefused) as refused:
        sign_in.finish(query, begun.login)
    assert refused.value.error == "invalid_client"
    sign_in.close()


def test_a_public_client_signs_in_with_pkce_alone(browser: httpx.Client, callback_url: str) -> None:
    with OidcServer(client_secret=None, redirect_uris=(callback_url,)) as provider:
        sign_in = OidcSignIn.from_settings(
            settings_for(provider.issuer, callback_url, CAIRN_OIDC_CLIENT_SECRET="")
        )
        assert sign_in is not None
        begun, query = come_back(sign_in, browser, "ada")
        assert sign_in.finish(query, begun.login).principal.role is Role.ADMIN
        sign_in.close()


def test_a_provider_that_is_down_or_names_another_issuer_is_unavailable(
    callback_url: str,
) -> None:
    with OidcServer(redirect_uris=(callback_url,)) as provider:
        # The discovery document names the issuer without the slash: not this one.
        settings = settings_for(provider.issuer + "/", callback_url)
        elsewhere = OidcSignIn.from_settings(settings)
        assert elsewhere is not None
        with pytest.raises(ProviderUnavailable, match="names issuer"):
            elsewhere.begin()
        elsewhere.close()
        gone = provider.issuer
    sign_in = OidcSignIn.from_settings(settings_for(gone, callback_url))
    assert sign_in is not None
    with pytest.raises(ProviderUnavailable):
        sign_in.begin()
    sign_in.close()


# -- ID tokens that are not to be believed --------------------------------------------------


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("bad_signature", BadSignature),  # another key, under the published key's id
        ("unknown_key", BadSignature),  # a key the provider never published
        ("wrong_audience", WrongAudience),
        ("wrong_issuer", WrongIssuer),
        ("expired", TokenExpired),
        ("wrong_nonce", NonceMismatch),
    ],
)
def test_a_bad_id_token_is_refused_with_its_reason(
    sign_in: OidcSignIn,
    browser: httpx.Client,
    issuer: str,
    name: str,
    error: type[SignInRefused],
) -> None:
    begun, query = come_back(sign_in, browser, "ada")
    fault(issuer, name)
    with pytest.raises(error) as refused:
        sign_in.finish(query, begun.login)
    assert type(refused.value) is error
    detail = json.dumps(refused.value.audit_detail())
    for secret in (query["code"], begun.login.state, begun.login.nonce, SECRET):
        assert secret not in detail


def test_keys_are_kept_and_fetched_again_when_the_provider_rotates(
    sign_in: OidcSignIn, browser: httpx.Client, issuer: str
) -> None:
    now = [1000.0]
    sign_in.provider.clock = lambda: now[0]

    def fetches() -> int:
        return int(httpx.get(f"{issuer}/control/stats").json()["jwks_fetches"])

    before = fetches()
    for _ in range(3):
        begun, query = come_back(sign_in, browser, "alice")
        sign_in.finish(query, begun.login)
    assert fetches() == before + 1  # kept
    for _ in range(2):  # tokens naming keys nobody published do not hammer the provider
        begun, query = come_back(sign_in, browser, "alice")
        fault(issuer, "unknown_key")
        with pytest.raises(BadSignature):
            sign_in.finish(query, begun.login)
    assert fetches() == before + 1
    httpx.post(f"{issuer}/control/rotate", json={"keep_old": False}).raise_for_status()
    now[0] += JWKS_REFETCH_S
    begun, query = come_back(sign_in, browser, "alice")
    assert sign_in.finish(query, begun.login).principal.role is Role.APPROVER
    assert fetches() == before + 2  # fetched again for the new key id, once


# -- the audit log ------------------------------------------------------------------------------


def test_sign_ins_and_refusals_are_audited_without_secrets(
    sign_in: OidcSignIn, browser: httpx.Client, database_url: str
) -> None:
    store = store_for(make_engine(database_url))
    audit = Audit(store)
    try:
        begun, query = come_back(sign_in, browser, "alice")
        record_sign_in(audit, sign_in.finish(query, begun.login), "10.0.0.7")
        begun, query = come_back(sign_in, browser, "nobody")
        with pytest.raises(NoMappedGroup) as no_group:
            sign_in.finish(query, begun.login)
        record_sign_in(audit, no_group.value, "10.0.0.8")
        with pytest.raises(StateMismatch) as forged:
            sign_in.finish({"code": "x", "state": "forged"}, sign_in.begin().login)
        record_sign_in(audit, forged.value, "10.0.0.9")
        with store.reading() as tx:
            entries = tx.audit_entries("default", limit=10)
    finally:
        store.dispose()
    seen = {(e.actor, e.kind, e.action, e.outcome, (e.detail or {}).get("reason")) for e in entries}
    assert seen == {
        ("person:alice@example.test", "person", "auth.oidc", "ok", None),
        ("person:nobody@example.test", "person", "auth.oidc", "refused", "no_mapped_group"),
        ("anonymous", "anonymous", "auth", "refused", "oidc: state_mismatch"),
    }
    assert query["code"] not in str([e.detail for e in entries])


def test_a_kept_login_state_reads_back_and_nothing_else_does() -> None:
    login = LoginState("s", "n", "v", 12.5)
    assert LoginState.from_dict(json.loads(json.dumps(login.to_dict()))) == login
    with pytest.raises(StateMismatch):
        LoginState.from_dict({"state": "s"})
