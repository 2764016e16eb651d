"""What a run announces to its webhook, decided from one step (pure, no I/O), and which
webhooks a run may name.

A run that names a webhook is announced when it ends (``run.succeeded``,
``run.failed``, ``run.cancelled``, ``run.compensated``, ``run.rolled_back``) and at the
milestones where someone may have to act: it starts waiting for a signal
(``run.waiting``), or a node is held for an operator's decision (``run.held``). Each
notice is identified by the run and the seq of the event that caused it, so the same
decision is never announced twice, whichever process writes it.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cairn.config import Settings
from cairn.errors import InvalidInput
from cairn.model.commands import Command, HoldExecution
from cairn.model.state import RunState
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.webhooks.signing import WebhookSecrets
from cairn.webhooks.targets import WebhookTargets, address_literal

MAX_URL_LENGTH = 2000
# A result bigger than this is left out of the body (the receiver asks the API for it):
# receivers commonly cap request bodies, and a retry loop over a 413 helps nobody.
MAX_RESULT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Notice:
    event_id: str
    kind: str
    body: dict[str, Any]


def check_url(url: object, hosts: Sequence[str] = (), targets: WebhookTargets | None = None) -> str:
    """A webhook URL as it will be stored, or :class:`InvalidInput`: http(s), a host,
    no credentials in it, (if ``hosts`` is set) a host one of its patterns matches, and
    not an address webhooks may not call (:class:`WebhookTargetRefused`). A host name's
    addresses are checked when the notifier connects: resolving it now would prove
    nothing about the answer then."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("webhook: a URL is required")
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        raise InvalidInput(f"webhook: the URL is longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a malformed port
    except ValueError as exc:
        raise InvalidInput(f"webhook: {url!r} is not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"webhook: {url!r} is not an http(s) URL with a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("webhook: credentials do not belong in the URL (requests are signed)")
    del port
    host = parts.hostname.lower()
    if hosts and not any(fnmatch.fnmatchcase(host, pattern.lower()) for pattern in hosts):
        raise InvalidInput(f"webhook: host {host!r} is not one webhooks may call")
    address = address_literal(host)
    if address is not None:
        (targets or WebhookTargets()).check(host, address)
    return url


class WebhookPolicy:
    """Which webhook a run may name: a URL webhooks may call, for a namespace that has a
    secret to sign with (nothing is sent unsigned)."""

    def __init__(self, settings: Settings) -> None:
        self.hosts = settings.webhook_hosts
        self.targets = WebhookTargets(settings.webhook_allow_networks)
        self.secrets = WebhookSecrets.from_settings(settings)

    def check(self, url: str | None, namespace: str) -> str | None:
        """A run's webhook URL as stored, or :class:`InvalidInput`."""
        if url is None:
            return None
        checked = check_url(url, self.hosts, self.targets)
        if not self.secrets.of(namespace):
            raise InvalidInput(
                f"webhook: namespace {namespace!r} has no signing secret "
                "(CAIRN_WEBHOOK_SECRETS): its runs cannot name a webhook"
            )
        return checked


def notices(
    before: RunState, after: RunState, commands: Sequence[Command], seq: int, namespace: str
) -> list[Notice]:
    """The notices one step gives: its run ending, or reaching a milestone."""
    kinds = []
    if after.status.terminal and not before.status.terminal:
        kinds.append(f"run.{after.status.value}")
    elif after.status is RunStatus.WAITING and before.status is not RunStatus.WAITING:
        kinds.append("run.waiting")
    if any(isinstance(command, HoldExecution) for command in commands):
        kinds.append("run.held")
    return [_notice(kind, after, seq, namespace) for kind in kinds]


def _notice(kind: str, state: RunState, seq: int, namespace: str) -> Notice:
    event_id = f"{state.run_id}.{seq}" + ("" if kind != "run.held" else ".held")
    run: dict[str, Any] = {
        "id": state.run_id,
        "namespace": namespace,
        "workflow": state.workflow,
        "version": state.version,
        "status": state.status.value,
        "reason": state.reason,
        "seq": seq,
    }
    if kind == "run.waiting":
        run["waiting_for"] = sorted(
            n.node for n in state.nodes.values() if n.status is NodeStatus.WAITING
        )
    elif kind == "run.held":
        run["held"] = sorted(n.node for n in state.nodes.values() if n.status is NodeStatus.HELD)
    elif state.status is RunStatus.SUCCEEDED:
        size = len(json.dumps(state.vars, separators=(",", ":")))
        if size <= MAX_RESULT_BYTES:
            run["result"] = state.vars
        else:
            run["result_omitted"] = f"{size} bytes: GET /v1/runs/{state.run_id}"
    body = {"id": event_id, "type": kind, "at": state.updated_at, "run": run}
    return Notice(event_id, kind, body)
