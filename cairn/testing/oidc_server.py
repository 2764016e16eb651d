"""A stand-in OpenID provider, for tests and for trying the console's sign-in on a laptop.

:class:`OidcServer` is a small local HTTP server that speaks enough of OpenID Connect for
a relying party to sign people in through it with the authorization code flow and PKCE:

- ``GET /.well-known/openid-configuration`` — the discovery document (the issuer is the
  server's own URL);
- ``GET /jwks`` — its public signing key(s): an RSA key generated at start;
- ``GET /authorize`` — checks the client, the redirect URI (exactly as registered), the
  PKCE challenge (S256 only) and the scope, then shows a plain HTML form to pick a user
  (``POST /authorize`` with ``username``), or, with ``login_hint=<user>``, signs that user
  in at once; either way the browser goes back to the redirect URI with a one-time
  ``code``, the ``state`` and ``iss`` (RFC 9207). An unknown user comes back with
  ``error=access_denied``;
- ``POST /token`` — checks the client (secret in a Basic header or in the form), that the
  code is known, unused and fresh, the redirect URI, and the PKCE verifier; answers an
  ID token signed RS256 with ``iss``, ``sub``, ``aud``, ``exp``, ``iat``, ``auth_time``,
  ``nonce``, ``email``, ``email_verified``, ``name`` and ``groups``.

Tests make it misbehave on purpose, through ``POST /control/fault`` with ``{"fault":
NAME}``: the next ID token it issues is, by name, ``wrong_audience`` (issued to another
client), ``expired``, ``wrong_issuer``, ``wrong_nonce``, ``bad_signature`` (signed by
another key under the published key's id) or ``unknown_key`` (signed by a key it never
published). ``POST /control/rotate`` makes a new signing key (the old one stays
published unless ``{"keep_old": false}``); ``GET /control/stats`` counts the JWKS fetches.

Run ``python -m cairn.testing.oidc_server --port 0 --redirect-uri URL [--users JSON]``:
its first line of output is ``oidc server listening on <issuer>``. It serves until
interrupted (SIGINT or SIGTERM). Only for tests: it keeps everything in memory, and any
user may sign in as anyone with a click.

It imports nothing from cairn, only joserfc (to sign).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import html
import json
import secrets
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from joserfc import jwt
from joserfc.jwk import RSAKey

__all__ = ["FAULTS", "OidcServer", "User"]

FAULTS = frozenset(
    {"wrong_audience", "expired", "wrong_issuer", "wrong_nonce", "bad_signature", "unknown_key"}
)
CODE_TTL_S = 60.0


@dataclass(frozen=True)
class User:
    """Who may sign in: ``name`` is the login name (the form's, ``login_hint``'s)."""

    name: str
    groups: tuple[str, ...] = ()
    email: str | None = None
    sub: str = ""

    @property
    def subject(self) -> str:
        return self.sub or f"sub-{self.name}"


DEFAULT_USERS = (
    User("ada", ("cairn-admins",), "ada@example.test"),
    User("otto", ("cairn-operators",), "otto@example.test"),
    User("alice", ("cairn-approvers",), "alice@example.test"),
    User("vic", ("cairn-viewers",), "vic@example.test"),
    User("nobody", ("marketing",), "nobody@example.test"),
)


@dataclass(frozen=True)
class _Grant:
    """An authorization waiting for its code to be exchanged."""

    user: User
    redirect_uri: str
    nonce: str | None
    challenge: str
    scope: str
    issued_at: float


class _Refused(Exception):
    """An OAuth error answered as JSON (the token endpoint's)."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error, self.description, self.status = error, description, status


@dataclass
class _State:
    keys: list[RSAKey]
    grants: dict[str, _Grant] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    jwks_fetches: int = 0
    tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _new_key() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"use": "sig", "alg": "RS256"}, auto_kid=True)


def s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


class OidcServer:
    """The provider (see the module's docstring); ``with OidcServer(...) as server:``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        client_id: str = "cairn",
        client_secret: str | None = "cairn-secret",
        redirect_uris: tuple[str, ...] = (),
        users: tuple[User, ...] = DEFAULT_USERS,
        token_ttl_s: float = 300.0,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.redirect_uris = redirect_uris
        self.users = {user.name: user for user in users}
        self.token_ttl_s = token_ttl_s
        self._state = _State([_new_key()])
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    issuer = url

    def start(self) -> OidcServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OidcServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- what tests steer ------------------------------------------------------------------

    def fault(self, name: str) -> None:
        """The next ID token misbehaves so (one of :data:`FAULTS`)."""
        if name not in FAULTS:
            raise ValueError(f"unknown fault {name!r}; known: {sorted(FAULTS)}")
        with self._state.lock:
            self._state.faults.append(name)

    def rotate(self, *, keep_old: bool = True) -> None:
        """Sign with a new key from now on (the old one still published if ``keep_old``)."""
        fresh = _new_key()
        with self._state.lock:
            self._state.keys = [fresh, *self._state.keys] if keep_old else [fresh]

    def stats(self) -> dict[str, int]:
        with self._state.lock:
            return {"jwks_fetches": self._state.jwks_fetches, "tokens": self._state.tokens}

    # -- the endpoints ---------------------------------------------------------------------

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "jwks_uri": f"{self.url}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": (
                ["client_secret_basic", "client_secret_post"] if self.client_secret else ["none"]
            ),
            "scopes_supported": ["openid", "email", "profile", "groups"],
            "claims_supported": ["sub", "email", "email_verified", "name", "groups"],
            "authorization_response_iss_parameter_supported": True,
        }

    def jwks(self) -> dict[str, Any]:
        with self._state.lock:
            self._state.jwks_fetches += 1
            keys = list(self._state.keys)
        return {"keys": [key.as_dict(private=False) for key in keys]}

    def authorize(self, query: Mapping[str, str]) -> tuple[int, str, str]:
        """(status, location or page, content type) for an authorization request; the
        user chosen by ``login_hint`` or the form's ``username``."""
        redirect_uri = query.get("redirect_uri", "")
        if query.get("client_id") != self.client_id or redirect_uri not in self.redirect_uris:
            # Never send a browser to a URI nobody registered: an error page instead.
            return 400, "<p>unknown client or redirect_uri</p>", "text/html"
        back = {"state": query.get("state", ""), "iss": self.issuer}
        problem = self._request_problem(query)
        if problem:
            return 302, _with(redirect_uri, error="invalid_request", **problem, **back), ""
        chosen = query.get("username") or query.get("login_hint")
        if not chosen:
            return 200, _login_form(query, sorted(self.users)), "text/html"
        user = self.users.get(chosen)
        if user is None:
            description = "no such user"
            return (
                302,
                _with(redirect_uri, error="access_denied", error_description=description, **back),
                "",
            )
        code = secrets.token_urlsafe(32)
        grant = _Grant(
            user,
            redirect_uri,
            query.get("nonce"),
            query["code_challenge"],
            query.get("scope", ""),
            time.monotonic(),
        )
        with self._state.lock:
            self._state.grants[code] = grant
        return 302, _with(redirect_uri, code=code, **back), ""

    @staticmethod
    def _request_problem(query: Mapping[str, str]) -> dict[str, str]:
        if query.get("response_type") != "code":
            return {"error_description": "response_type must be code"}
        if "openid" not in query.get("scope", "").split():
            return {"error_description": "scope must include openid"}
        if not query.get("code_challenge") or query.get("code_challenge_method") != "S256":
            return {"error_description": "PKCE with S256 is required"}
        return {}

    def token(self, form: Mapping[str, str], authorization: str | None) -> dict[str, Any]:
        """The token endpoint's answer, or :class:`_Refused`."""
        self._authenticate(form, authorization)
        if form.get("grant_type") != "authorization_code":
            raise _Refused("unsupported_grant_type", "only authorization_code")
        with self._state.lock:
            grant = self._state.grants.pop(form.get("code", ""), None)  # one use, come what may
        if grant is None:
            raise _Refused("invalid_grant", "the code is unknown or was used already")
        if time.monotonic() - grant.issued_at > CODE_TTL_S:
            raise _Refused("invalid_grant", "the code has expired")
        if form.get("redirect_uri") != grant.redirect_uri:
            raise _Refused("invalid_grant", "redirect_uri is not the authorization request's")
        verifier = form.get("code_verifier", "")
        if not hmac.compare_digest(s256(verifier).encode(), grant.challenge.encode()):
            raise _Refused("invalid_grant", "the PKCE code_verifier does not match")
        return {
            "access_token": secrets.token_urlsafe(32),
            "token_type": "Bearer",
            "expires_in": int(self.token_ttl_s),
            "scope": grant.scope,
            "id_token": self._id_token(grant),
        }

    def _authenticate(self, form: Mapping[str, str], authorization: str | None) -> None:
        client_id, secret = form.get("client_id"), form.get("client_secret")
        scheme, _, credentials = (authorization or "").partition(" ")
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(credentials, validate=True).decode()
            except (ValueError, UnicodeDecodeError):
                decoded = ""
            user, _, password = decoded.partition(":")
            client_id, secret = unquote(user), unquote(password)
        if client_id != self.client_id:
            raise _Refused("invalid_client", "unknown client", 401)
        if self.client_secret is not None and not hmac.compare_digest(
            (secret or "").encode(), self.client_secret.encode()
        ):
            raise _Refused("invalid_client", "wrong client secret", 401)

    def _id_token(self, grant: _Grant) -> str:
        now = int(time.time())
        user = grant.user
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": user.subject,
            "aud": self.client_id,
            "iat": now,
            "exp": now + int(self.token_ttl_s),
            "auth_time": now,
            "name": user.name,
            "groups": list(user.groups),
        }
        if grant.nonce is not None:
            claims["nonce"] = grant.nonce
        if user.email is not None:
            claims |= {"email": user.email, "email_verified": True}
        with self._state.lock:
            fault = self._state.faults.pop(0) if self._state.faults else None
            self._state.tokens += 1
            key = self._state.keys[0]
        signer, kid = key, str(key.kid)
        if fault == "wrong_audience":
            claims["aud"] = "another-client"
        elif fault == "expired":
            claims |= {"iat": now - 2 * int(self.token_ttl_s), "exp": now - int(self.token_ttl_s)}
        elif fault == "wrong_issuer":
            claims["iss"] = "https://impostor.example.test"
        elif fault == "wrong_nonce":
            claims["nonce"] = secrets.token_urlsafe(16)
        elif fault in ("bad_signature", "unknown_key"):
            signer = _new_key()
            kid = kid if fault == "bad_signature" else str(signer.kid)
        return jwt.encode({"alg": "RS256", "kid": kid, "typ": "JWT"}, claims, signer)


def _with(url: str, **params: str) -> str:
    separator = "&" if urlsplit(url).query else "?"
    return f"{url}{separator}{urlencode(params)}"


def _login_form(query: Mapping[str, str], users: list[str]) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
        for k, v in query.items()
        if k != "username"
    )
    options = "".join(f"<option>{html.escape(name)}</option>" for name in users)
    return (
        "<!doctype html><title>Sign in</title><h1>Sign in (test provider)</h1>"
        f'<form method="post" action="/authorize">{hidden}'
        f'<label>User <select name="username">{options}</select></label>'
        '<button type="submit">Sign in</button></form>'
    )


class _Handler(BaseHTTPRequestHandler):
    server_version = "cairn-oidc-stand-in"

    @property
    def owner(self) -> OidcServer:
        owner: OidcServer = self.server.owner  # type: ignore[attr-defined]
        return owner

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the tests' output is theirs

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        if parts.path == "/.well-known/openid-configuration":
            self._json(200, self.owner.discovery())
        elif parts.path == "/jwks":
            self._json(200, self.owner.jwks())
        elif parts.path == "/authorize":
            self._authorize(query)
        elif parts.path == "/control/stats":
            self._json(200, self.owner.stats())
        else:
            self._json(404, {"error": "not_found"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace")
        try:
            if path == "/authorize":
                self._authorize(dict(parse_qsl(body)))
            elif path == "/token":
                answer = self.owner.token(dict(parse_qsl(body)), self.headers.get("Authorization"))
                self._json(200, answer)
            elif path == "/control/fault":
                self.owner.fault(str(json.loads(body)["fault"]))
                self._json(200, {"ok": True})
            elif path == "/control/rotate":
                self.owner.rotate(keep_old=bool(json.loads(body or "{}").get("keep_old", True)))
                self._json(200, {"ok": True})
            else:
                self._json(404, {"error": "not_found"})
        except _Refused as refused:
            self._json(
                refused.status,
                {"error": refused.error, "error_description": refused.description},
            )
        except (ValueError, KeyError) as exc:
            self._json(400, {"error": "invalid_request", "error_description": str(exc)})

    def _authorize(self, query: dict[str, str]) -> None:
        status, content, content_type = self.owner.authorize(query)
        if status == 302:
            self.send_response(302)
            self.send_header("Location", content)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._send(status, content.encode(), f"{content_type}; charset=utf-8")

    def _json(self, status: int, payload: Mapping[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)


def _users(text: str) -> tuple[User, ...]:
    """``{"alice": {"groups": [...], "email": "...", "sub": "..."}, ...}`` → the users."""
    found = json.loads(text)
    if not isinstance(found, dict):
        raise ValueError("--users is a JSON object: name -> {groups, email, sub}")
    return tuple(
        User(
            str(name),
            tuple(str(group) for group in spec.get("groups", [])),
            spec.get("email"),
            str(spec.get("sub", "")),
        )
        for name, spec in found.items()
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cairn.testing.oidc_server",
        description="Serve a stand-in OpenID provider until interrupted (tests only).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--client-id", default="cairn")
    parser.add_argument("--client-secret", default="cairn-secret", help="'' for a public client")
    parser.add_argument("--redirect-uri", action="append", default=[], required=True)
    parser.add_argument("--users", help='JSON: {"alice": {"groups": [...], "email": ...}}')
    parser.add_argument("--token-ttl-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    try:
        users = _users(args.users) if args.users else DEFAULT_USERS
    except (ValueError, AttributeError, TypeError) as exc:
        parser.error(f"--users: {exc}")
    server = OidcServer(
        args.host,
        args.port,
        client_id=args.client_id,
        client_secret=args.client_secret or None,
        redirect_uris=tuple(args.redirect_uri),
        users=users,
        token_ttl_s=args.token_ttl_s,
    ).start()
    print(f"oidc server listening on {server.issuer}", flush=True)
    stop = threading.Event()

    def interrupted(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
