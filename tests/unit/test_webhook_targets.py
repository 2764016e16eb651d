"""Which addresses webhooks may call: an address in the URL is judged at submit, a host
name's addresses when the notifier connects. Host names are answered by a stub resolver
and connections go through a spy that connects to loopback only and refuses anything
else, so no test here ever reaches past this machine. Delivery to a receiver on loopback
from the embedded runtime: tests/embedded/test_webhook_targets.py."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path

import httpcore
import httpx
import pytest

from cairn.config import Settings
from cairn.engine.notices import check_url
from cairn.errors import ConfigError, InvalidInput
from cairn.webhooks import WebhookTargetRefused
from cairn.webhooks.targets import WebhookTargets, kind_of
from cairn.webhooks.transport import webhook_client
from tests.unit.test_webhooks import _runtime

PUBLIC = "93.184.215.14"
METADATA = "169.254.169.254"


class Resolver:
    """Answers each lookup with its next answer (the last one, once they run out)."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class ConnectSpy(httpcore.NetworkBackend):
    """The connector under the guard: records what it is asked to connect to, connects
    to a loopback address for real and refuses everything else."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []
        self.real = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        self.asked.append((host, port))
        if not ipaddress.ip_address(host).is_loopback:  # a name (not an address) fails too
            raise httpcore.ConnectError(f"spy: not connecting to {host}")
        return self.real.connect_tcp(host, port, timeout, local_address, socket_options)


# -- which addresses ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        (METADATA, "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("100.64.0.1", "shared (carrier-grade NAT)"),
        ("240.0.0.1", "reserved"),
        # IPv6 forms of an IPv4 address reach that address: judged as it.
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64
    ],
)
def test_addresses_that_are_not_public_are_refused_by_default(address: str, kind: str) -> None:
    assert kind_of(ipaddress.ip_address(address)) == kind
    assert WebhookTargets().refusal(ipaddress.ip_address(address)) == kind


@pytest.mark.parametrize("address", ["192.0.2.1", "198.18.0.1", "2001:db8::1"])
def test_documentation_and_benchmark_ranges_are_not_public(address: str) -> None:
    assert kind_of(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", [PUBLIC, "2606:4700::1111", f"::ffff:{PUBLIC}"])
def test_public_addresses_are_called(address: str) -> None:
    assert WebhookTargets().refusal(ipaddress.ip_address(address)) is None


def test_allowed_networks_let_their_addresses_through_and_no_others() -> None:
    targets = WebhookTargets(["127.0.0.1/32", "10.20.0.0/16"])
    assert targets.refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert targets.refusal(ipaddress.ip_address("::ffff:127.0.0.1")) is None
    assert targets.refusal(ipaddress.ip_address("10.20.3.4")) is None
    assert targets.refusal(ipaddress.ip_address("127.0.0.2")) == "loopback"
    assert targets.refusal(ipaddress.ip_address("10.21.0.1")) == "private"
    assert targets.refusal(ipaddress.ip_address(METADATA)) == "link-local"


def test_the_setting_takes_networks_and_addresses_and_refuses_anything_else() -> None:
    variable = "CAIRN_WEBHOOK_ALLOW_NETWORKS"
    settings = Settings.from_env({variable: "127.0.0.1, 10.20.0.0/16,fd00::/8"})
    assert settings.webhook_allow_networks == ["127.0.0.1/32", "10.20.0.0/16", "fd00::/8"]
    assert Settings().webhook_allow_networks == []  # by default: public addresses only
    for typo in ("10.0.0.1/8", "intranet", "10.0.0.0/33"):
        with pytest.raises(ConfigError, match="not a network"):
            Settings.from_env({variable: typo})


# -- at submit: an address in the URL ---------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        f"http://{METADATA}/latest/meta-data/",
        "https://10.0.0.5/hook",
        "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]/",
        "http://[fe80::1]/",
        "http://0.0.0.0:8080/",
        # What the system resolver reads as an address, without asking DNS.
        "http://127.1/",
        "http://2130706433/",
        "http://0x7f.0.0.1/",
    ],
)
def test_a_url_naming_a_refused_address_is_refused_at_submit(url: str) -> None:
    with pytest.raises(WebhookTargetRefused, match="not an address webhooks may call") as refused:
        check_url(url)
    assert isinstance(refused.value, InvalidInput)  # a 422 from the API
    assert refused.value.to_dict()["code"] == "webhook_target_refused"
    assert "CAIRN_WEBHOOK_ALLOW_NETWORKS" in str(refused.value)


def test_an_allowed_or_public_address_and_any_host_name_pass_at_submit() -> None:
    loopback = WebhookTargets(["127.0.0.0/8"])
    assert check_url("http://127.0.0.1:8080/x", (), loopback) == "http://127.0.0.1:8080/x"
    assert check_url(f"https://{PUBLIC}/x") == f"https://{PUBLIC}/x"
    # A name is judged by what it resolves to when the notifier connects, not now.
    assert check_url("http://localhost:8080/x") == "http://localhost:8080/x"


def test_submit_refuses_a_metadata_webhook_under_default_settings(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    try:
        with pytest.raises(WebhookTargetRefused, match="link-local"):
            runtime.orchestrator.submit("chain10", {}, webhook=f"http://{METADATA}/latest/")
    finally:
        runtime.close()


# -- at connect: a host name's addresses ----------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        ("127.0.0.1", "127.0.0.1) is not an address webhooks may call (loopback)"),
        (METADATA, f"{METADATA}) is not an address webhooks may call (link-local)"),
        ("::ffff:127.0.0.1", "that is 127.0.0.1) is not an address webhooks may call (loopback)"),
        ("10.0.0.7", "10.0.0.7) is not an address webhooks may call (private)"),
    ],
)
def test_a_host_resolving_to_a_refused_address_is_never_connected_to(
    answer: str, shown: str
) -> None:
    resolver, spy = Resolver([answer]), ConnectSpy()
    client = webhook_client(Settings(), resolver, spy)
    with client, pytest.raises(WebhookTargetRefused) as refused:
        client.post("http://hooks.test:8080/x", content=b"{}")
    assert str(refused.value).startswith("webhook: hooks.test (resolved to ")
    assert shown in str(refused.value)
    assert spy.asked == []
    assert resolver.lookups == ["hooks.test"]


def test_the_system_resolver_is_judged_too() -> None:
    # localhost is answered from the hosts file: no query leaves the machine.
    spy = ConnectSpy()
    client = webhook_client(Settings(), backend=spy)
    with client, pytest.raises(WebhookTargetRefused, match=r"localhost \(resolved to "):
        client.post("http://localhost:8080/x", content=b"{}")
    assert spy.asked == []


def test_one_refused_address_among_the_answers_refuses_the_host() -> None:
    spy = ConnectSpy()
    client = webhook_client(Settings(), Resolver([PUBLIC, "10.0.0.7"]), spy)
    with client, pytest.raises(WebhookTargetRefused, match=r"resolved to 10\.0\.0\.7\)"):
        client.post("https://hooks.test/x", content=b"{}")
    assert spy.asked == []


def test_a_public_answer_is_connected_to_as_the_address_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A proxy would connect on the notifier's behalf, to whatever it resolves: none is used.
    for variable in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(variable, "http://10.9.9.9:3128")
    resolver, spy = Resolver([PUBLIC]), ConnectSpy()
    client = webhook_client(Settings(), resolver, spy)
    with client, pytest.raises(httpx.ConnectError, match=f"spy: not connecting to {PUBLIC}"):
        client.post("https://hooks.test/x", content=b"{}")
    assert spy.asked == [(PUBLIC, 443)]
    assert resolver.lookups == ["hooks.test"]
