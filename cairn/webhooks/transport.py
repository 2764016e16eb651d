"""The notifier's HTTP client: it connects only to addresses it has checked.

httpx hands a connection's host to httpcore's network backend, which resolves it and
connects (``socket.create_connection``). :class:`ConnectGuard` is that backend for
webhooks: it resolves the host once itself, checks every address it got
(:class:`~cairn.webhooks.targets.WebhookTargets`), and gives the backend underneath only
an address — a literal, which nothing resolves again. So the address connected to is
the address checked: a DNS answer that changes (rebinding) changes what is checked, never
what is connected to behind the check. TLS still names the URL's host (SNI and
certificate), and the ``Host`` header is the URL's: httpcore takes both from the request,
not from the socket.

The client takes no proxy from the environment (a proxy would connect on our behalf,
unchecked) and follows no redirect (a redirect could lead a signed body anywhere).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from functools import partial

import httpcore
import httpx

from cairn.config import Settings
from cairn.webhooks.targets import Address, WebhookTargets, address_literal

USER_AGENT = "cairn-webhooks/1"

# (host, port) → the addresses to try, in order: a stub in tests, the system's otherwise.
Resolver = Callable[[str, int], Sequence[str]]


def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses by the system resolver, in its order of preference."""
    addresses = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        text = str(sockaddr[0])
        if len(sockaddr) == 4 and sockaddr[3]:  # IPv6: a link-local address's interface
            text = f"{text}%{sockaddr[3]}"
        if text not in addresses:
            addresses.append(text)
    return addresses


class ConnectGuard(httpcore.NetworkBackend):
    """A network backend that resolves, checks, then connects to the checked address."""

    def __init__(
        self,
        targets: WebhookTargets,
        resolver: Resolver = system_resolver,
        backend: httpcore.NetworkBackend | None = None,
    ) -> None:
        self.targets = targets
        self.resolver = resolver
        self.backend = backend if backend is not None else httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self._addresses(host, port)
        for address in addresses:  # one refused address refuses the host: no mixed answers
            self.targets.check(host, address)
        connect = partial(
            self.backend.connect_tcp,
            port=port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )
        for address in addresses[:-1]:  # as create_connection does: the next, if refused
            with contextlib.suppress(httpcore.ConnectError, httpcore.ConnectTimeout):
                return connect(str(address))
        return connect(str(addresses[-1]))

    def _addresses(self, host: str, port: int) -> list[Address]:
        literal = address_literal(host)
        if literal is not None:
            return [literal]
        try:
            answers = self.resolver(host, port)
            addresses = [ipaddress.ip_address(answer) for answer in answers]
        except (OSError, UnicodeError, ValueError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        if not addresses:
            raise httpcore.ConnectError(f"cannot resolve {host!r}: no address")
        return addresses

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport, its connection pool on a :class:`ConnectGuard`.

    httpx 0.28 takes no network backend (encode/httpx#3749 would add one), so the pool it
    built is replaced by one that has the guard; httpx's request and error handling stay
    as they are, and the test that connects through the guard fails if that ever stops."""

    def __init__(self, guard: ConnectGuard) -> None:
        super().__init__()
        limits = httpx.Limits()
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),  # SSL_CERT_FILE/_DIR apply, as before
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=guard,
        )


def webhook_client(
    settings: Settings,
    resolver: Resolver = system_resolver,
    backend: httpcore.NetworkBackend | None = None,
) -> httpx.Client:
    """The notifier's client: every connection checked (``resolver`` and ``backend``, the
    connector underneath, are for tests), no proxy, no redirect."""
    guard = ConnectGuard(WebhookTargets(settings.webhook_allow_networks), resolver, backend)
    return httpx.Client(
        transport=GuardedTransport(guard),
        timeout=settings.webhook_timeout_s,
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": USER_AGENT},
    )
