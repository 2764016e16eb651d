"""The stand-in OpenID provider (``python -m cairn.testing.oidc_server``) as a subprocess
for a test — the OIDC tests' and the console's — and the faults a test asks of it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

from tests.support.services import ROOT


@contextmanager
def running_provider(
    redirect_uri: str,
    *,
    client_secret: str = "cairn-secret",
    users: Mapping[str, Mapping[str, Any]] | None = None,
) -> Iterator[str]:
    """The provider, for client ``cairn`` coming back to ``redirect_uri``; yields its issuer
    URL. ``users``: ``{"alice": {"groups": [...], "email": ...}}`` (default: the module's)."""
    command = [sys.executable, "-m", "cairn.testing.oidc_server", "--port", "0"]
    command += ["--client-secret", client_secret, "--redirect-uri", redirect_uri]
    if users is not None:
        command += ["--users", json.dumps(users)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("oidc server listening on "), line
        yield line.split()[-1]
        process.terminate()
        assert process.wait(timeout=10) == 0  # it serves until told to stop, then stops
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def fault(issuer: str, name: str) -> None:
    """The provider's next ID token misbehaves so (``cairn.testing.oidc_server.FAULTS``)."""
    httpx.post(f"{issuer}/control/fault", json={"fault": name}).raise_for_status()
