"""Console sessions: a signed-in browser is a random token in an HTTP-only cookie; the
database keeps only the token's SHA-256 (migration 0023), with the principal it stands
for and when it ends. Its CSRF token is derived from the session token (an HMAC), so
it needs no column and changes with every sign-in.

:func:`start_session` is the one way in: signing in with an API key calls it, and so
will OpenID Connect, once the identity provider has vouched for a person (name,
namespace, role): whoever verified the principal hands it here.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from cairn.access import Authenticator
from cairn.model.principals import Principal, PrincipalKind, Role
from cairn.store.sql import Store

COOKIE = "cairn_session"
# Before sign-in: a random value in a cookie the sign-in form must echo (a login CSRF
# guard: another site cannot sign a browser in as its own principal).
PRE_COOKIE = "cairn_signin"


@dataclass(frozen=True)
class Session:
    """A signed-in session: the principal, the token (the cookie's value, known only to
    the browser and to this request), its CSRF token, and when it ends."""

    principal: Principal
    token: str
    csrf: str
    expires_at: float


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def csrf_for(token: str) -> str:
    """The CSRF token every form of session ``token`` carries."""
    return hmac.new(token.encode(), b"cairn-console-csrf", hashlib.sha256).hexdigest()


def same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def start_session(store: Store, principal: Principal, lifetime_s: float) -> Session:
    """Sign ``principal`` in (already verified: by its API key, or by the identity
    provider): a new session ending ``lifetime_s`` from now. The caller sets the cookie
    (:func:`cairn.console.web.set_session_cookie`)."""
    token = secrets.token_urlsafe(32)
    row = {
        "namespace": principal.namespace,
        "name": principal.name,
        "kind": principal.kind.value,
        "role": principal.role.value,
        "payloads": principal.payloads,
        "key_id": principal.key_id,
    }
    with store.transaction() as tx:
        tx.sweep_sessions()
        expires_at = tx.add_session(digest(token), row, lifetime_s)
    return Session(principal, token, csrf_for(token), expires_at)


def find_session(store: Store, authenticator: Authenticator, token: str | None) -> Session | None:
    """The live session of cookie value ``token``: None if there is none, it has expired,
    or the API key it signed in with has stopped working (revoked, expired)."""
    if not token or len(token) > 200:
        return None
    with store.reading() as tx:
        found = tx.session(digest(token))
    if found is None:
        return None
    if found.key_id is not None and not authenticator.works(found.key_id):
        return None
    principal = Principal(
        found.name,
        found.namespace,
        Role(found.role),
        PrincipalKind(found.kind),
        payloads=found.payloads,
        key_id=found.key_id,
    )
    return Session(principal, token, csrf_for(token), found.expires_at)


def end_session(store: Store, token: str) -> None:
    """Sign out: the session's row is deleted, so its cookie signs nobody in again."""
    with store.transaction() as tx:
        tx.end_session(digest(token))
