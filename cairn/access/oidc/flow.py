"""Sign-in through OpenID Connect: the relying party's side of the authorization code
flow with PKCE (S256), ``state`` and ``nonce``, in two calls a web route makes.

- :meth:`OidcSignIn.begin` → :class:`Begun`: the URL to send the browser to, and the
  :class:`LoginState` the caller keeps on the server side (in its session store, never in
  a cookie the browser could edit or replay) until the browser comes back;
- :meth:`OidcSignIn.finish` (the callback's query parameters, that kept state) →
  :class:`SignedIn` with a verified ``person:<name>`` principal, or a
  :class:`~cairn.access.oidc.errors.SignInRefused` saying why. The caller drops the login
  state either way: it is good for one callback.

The code is exchanged at the token endpoint with the PKCE verifier (and the client secret,
for a confidential client); the ID token that comes back is verified
(:mod:`cairn.access.oidc.id_token`) and its groups mapped to a role
(:mod:`cairn.access.oidc.mapping`). Nothing else of the provider's answer is used: no
access token is kept.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from cairn.access.oidc.errors import (
    InvalidToken,
    LoginExpired,
    ProviderRefused,
    ProviderUnavailable,
    StateMismatch,
    WrongIssuer,
)
from cairn.access.oidc.id_token import LEEWAY_S, verify_id_token
from cairn.access.oidc.mapping import GroupRoles
from cairn.access.oidc.provider import Provider
from cairn.config import Settings
from cairn.model.principals import Principal

# How long a begun sign-in may take before its callback is turned away, seconds.
LOGIN_TTL_S = 600.0
HTTP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class LoginState:
    """What the caller keeps between :meth:`~OidcSignIn.begin` and
    :meth:`~OidcSignIn.finish`: all three are secrets of this one login."""

    state: str
    nonce: str
    code_verifier: str
    started_at: float  # seconds since the epoch: a stored state survives a restart

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoginState:
        """A kept state read back; :class:`StateMismatch` if it is not one."""
        try:
            found = cls(
                str(data["state"]),
                str(data["nonce"]),
                str(data["code_verifier"]),
                float(data["started_at"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateMismatch("no sign-in was begun in this session") from exc
        return found


@dataclass(frozen=True)
class Begun:
    url: str  # where to redirect the browser (302)
    login: LoginState  # what to keep, server-side, for the callback


@dataclass(frozen=True)
class SignedIn:
    """A verified person: ``principal`` (kind ``person``) is who acts; the rest says where
    it came from. ``expires_at``: the ID token's expiry (a session may end sooner)."""

    principal: Principal
    issuer: str
    subject: str
    groups: tuple[str, ...]
    expires_at: float


class OidcSignIn:
    """Sign-in through one OpenID provider (see the module's docstring)."""

    def __init__(
        self,
        *,
        issuer: str,
        client_id: str,
        client_secret: str | None,
        redirect_url: str,
        scopes: tuple[str, ...],
        roles: GroupRoles,
        http: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client_id = client_id
        self._client_secret = client_secret
        self.redirect_url = redirect_url
        self.scopes = scopes
        self.roles = roles
        self.http = http or httpx.Client(timeout=HTTP_TIMEOUT_S, follow_redirects=False)
        self.provider = Provider(issuer, self.http)
        self.clock = clock

    @classmethod
    def from_settings(
        cls, settings: Settings, *, http: httpx.Client | None = None
    ) -> OidcSignIn | None:
        """The sign-in ``CAIRN_OIDC_*`` configure; None when ``CAIRN_OIDC_ISSUER`` is unset."""
        if settings.oidc_issuer is None:
            return None
        assert settings.oidc_client_id is not None and settings.oidc_redirect_url is not None
        secret = settings.oidc_client_secret
        return cls(
            issuer=settings.oidc_issuer,
            client_id=settings.oidc_client_id,
            client_secret=None if secret is None else secret.get_secret_value(),
            redirect_url=settings.oidc_redirect_url,
            scopes=tuple(settings.oidc_scopes),
            roles=GroupRoles(
                settings.oidc_roles,
                settings.oidc_namespace,
                frozenset(settings.oidc_payload_groups),
                groups_claim=settings.oidc_groups_claim,
                name_claim=settings.oidc_name_claim,
            ),
            http=http,
        )

    @property
    def issuer(self) -> str:
        return self.provider.issuer

    def close(self) -> None:
        """Close the HTTP client (a client given to the constructor too)."""
        self.http.close()

    def begin(self, *, login_hint: str | None = None) -> Begun:
        """A new login: the provider's authorization URL and the state to keep.
        ``login_hint``: who is signing in, if known (the provider may preselect them)."""
        login = LoginState(
            state=secrets.token_urlsafe(32),
            nonce=secrets.token_urlsafe(32),
            code_verifier=secrets.token_urlsafe(64),  # 86 characters (RFC 7636: 43 to 128)
            started_at=self.clock(),
        )
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect_url,
            "scope": " ".join(self.scopes),
            "state": login.state,
            "nonce": login.nonce,
            "code_challenge": s256(login.code_verifier),
            "code_challenge_method": "S256",
            **({"login_hint": login_hint} if login_hint else {}),
        }
        endpoint = self.provider.discovery().authorization_endpoint
        separator = "&" if "?" in endpoint else "?"
        return Begun(f"{endpoint}{separator}{urlencode(query)}", login)

    def finish(self, params: Mapping[str, str], login: LoginState) -> SignedIn:
        """The person the provider sent back with ``params`` (the callback's query), for the
        login ``login`` kept since :meth:`begin`; a ``SignInRefused`` otherwise."""
        code = self._callback_code(params, login)
        id_token = self._exchange(code, login)
        claims = verify_id_token(
            id_token,
            provider=self.provider,
            client_id=self.client_id,
            nonce=login.nonce,
            now=self.clock(),
        )
        return SignedIn(
            self.roles.principal(claims),
            self.issuer,
            claims["sub"],
            tuple(self.roles.groups_of(claims)),
            float(claims["exp"]),
        )

    def _callback_code(self, params: Mapping[str, str], login: LoginState) -> str:
        state = params.get("state") or ""
        if not login.state or not hmac.compare_digest(state.encode(), login.state.encode()):
            raise StateMismatch("the callback's state is not this login's")
        # (begun, perhaps, by another replica of the API, whose clock may differ a little)
        if not -LEEWAY_S <= self.clock() - login.started_at <= LOGIN_TTL_S:
            raise LoginExpired(f"the sign-in began more than {LOGIN_TTL_S:.0f} s ago")
        # RFC 9207: a provider that names itself in the callback must be the one asked (a
        # mix-up attack sends the browser back with another provider's code).
        if "iss" in params and params["iss"] != self.issuer:
            raise WrongIssuer("the callback comes from another issuer")
        if "error" in params:
            raise ProviderRefused(
                params["error"], params.get("error_description", ""), at="authorization"
            )
        code = params.get("code")
        if not code:
            raise ProviderRefused("invalid_request", "the callback has no code", at="authorization")
        return code

    def _exchange(self, code: str, login: LoginState) -> str:
        """The ID token the token endpoint gives for ``code``."""
        discovery = self.provider.discovery()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_url,
            "code_verifier": login.code_verifier,
        }
        headers = self._authenticate(form, discovery.token_auth_methods)
        try:
            response = self.http.post(discovery.token_endpoint, data=form, headers=headers)
        except httpx.HTTPError as exc:
            raise ProviderUnavailable(f"the token endpoint: {type(exc).__name__}") from exc
        answer = _json_object(response)
        if response.status_code in (400, 401) and isinstance(answer.get("error"), str):
            raise ProviderRefused(
                answer["error"], str(answer.get("error_description", "")), at="token"
            )
        if response.status_code != 200:
            raise ProviderUnavailable(f"the token endpoint answered {response.status_code}")
        id_token = answer.get("id_token")
        if not isinstance(id_token, str):
            raise InvalidToken("the token endpoint answered no ID token")
        return id_token

    def _authenticate(self, form: dict[str, str], methods: tuple[str, ...]) -> dict[str, str]:
        """How the token request says it is cairn's (its headers; ``form`` is added to): the
        client secret in a Basic header, or in the form if the provider takes only that; a
        public client only names itself."""
        if self._client_secret is None:
            form["client_id"] = self.client_id  # PKCE is a public client's proof
        elif "client_secret_basic" in methods or "client_secret_post" not in methods:
            # RFC 6749, 2.3.1: both are form-encoded before they go into the header.
            pair = f"{quote(self.client_id)}:{quote(self._client_secret)}".encode()
            return {"Authorization": f"Basic {base64.b64encode(pair).decode('ascii')}"}
        else:
            form |= {"client_id": self.client_id, "client_secret": self._client_secret}
        return {}


def s256(verifier: str) -> str:
    """The PKCE S256 challenge of ``verifier`` (RFC 7636, 4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        found = response.json()
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


__all__ = ["LOGIN_TTL_S", "Begun", "LoginState", "OidcSignIn", "SignedIn", "s256"]
