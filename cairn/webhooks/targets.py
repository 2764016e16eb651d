"""Which addresses webhooks may reach: public ones, and those an operator allows.

A webhook URL comes from whoever submits a run, and the scheduler that POSTs to it sits
inside the deployment: left alone, any API key holder could make it call the cloud's
metadata service (169.254.169.254), a database on loopback or anything on the private
network. So an address that is not public — private, loopback, link-local, unspecified,
multicast, reserved, shared (carrier-grade NAT), or such an address inside an IPv6 one —
is refused unless ``CAIRN_WEBHOOK_ALLOW_NETWORKS`` names a network holding it.

An address written in the URL is refused when the run is submitted. A host name is
judged when the notifier connects, on every address it resolves to, and only an address
judged is connected to (:mod:`cairn.webhooks.transport`): a DNS answer cannot change
between the check and the connection, because there is only the one answer.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from cairn.errors import InvalidInput

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_SETTING = "CAIRN_WEBHOOK_ALLOW_NETWORKS"
# RFC 6598's shared space: neither private nor public, and often the provider's own hosts.
SHARED = ipaddress.ip_network("100.64.0.0/10")
# RFC 6052's NAT64 prefix: a gateway turns 64:ff9b::a.b.c.d into a.b.c.d.
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class WebhookTargetRefused(InvalidInput):
    """A webhook that names, or resolves to, an address webhooks may not call."""

    code = "webhook_target_refused"


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for: IPv4-mapped (::ffff:a.b.c.d), 6to4
    (2002::/16) or NAT64 (64:ff9b::/96) — the address a packet to it really reaches."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def kind_of(address: Address) -> str | None:
    """What makes an address one webhooks may not call by default, or None: public."""
    address = embedded_ipv4(address) or address
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("shared (carrier-grade NAT)", address in SHARED),
        ("reserved", address.is_reserved),
        ("private", address.is_private or getattr(address, "is_site_local", False)),
        # What is left and still not global: documentation, benchmarking, IETF ranges.
        ("non-public", not address.is_global),
    )
    return next((kind for kind, applies in checks if applies), None)


def address_literal(host: str) -> Address | None:
    """The address a URL's host names without asking DNS, or None for a host name.

    The system resolver reads more than dotted quads as addresses (``127.1``,
    ``2130706433``, ``0x7f.0.0.1``); asked with AI_NUMERICHOST it says which, and never
    sends a query."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        return None
    return ipaddress.ip_address(infos[0][4][0])


class WebhookTargets:
    """The addresses webhooks may call: public ones, and those in the allowed networks."""

    def __init__(self, allowed: Iterable[str | Network] = ()) -> None:
        self.allowed = tuple(ipaddress.ip_network(network) for network in allowed)

    def refusal(self, address: Address) -> str | None:
        """Why webhooks may not call ``address`` (its kind), or None."""
        kind = kind_of(address)
        reached = embedded_ipv4(address) or address
        if kind is None or any(reached in network for network in self.allowed):
            return None
        return kind

    def check(self, host: str, address: Address) -> None:
        """Raise :class:`WebhookTargetRefused` if webhooks may not call ``address``, which
        ``host`` (the URL's) is or resolves to."""
        kind = self.refusal(address)
        if kind is None:
            return
        ipv4 = embedded_ipv4(address)  # ::ffff:7f00:1 is 127.0.0.1: say so
        shown = str(address) if ipv4 is None else f"{address}, that is {ipv4}"
        what = shown if host == str(address) else f"{host} (resolved to {shown})"
        raise WebhookTargetRefused(
            f"webhook: {what} is not an address webhooks may call ({kind}); an operator "
            f"may allow its network with {ALLOW_SETTING}"
        )
