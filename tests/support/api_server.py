"""A whole deployment for an HTTP API test module: its own database and Redis pair, a
Celery worker and the scheduler (so runs really execute), and ``cairn api`` as a uvicorn
subprocess — started once per module (a worker per test would cost more than the tests).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from cairn.config import Settings
from tests.integration.test_lease_metrics import free_ports
from tests.support.cluster import FAST, WORKFLOWS, Cluster
from tests.support.services import ROOT, admin, db_url, drop, redis_pair


@dataclass
class Deployment:
    cluster: Cluster
    base_url: str

    @property
    def ledger(self) -> Path:
        return self.cluster.ledger


def bearer(key: str) -> dict[str, str]:
    """The header that presents API key ``key``."""
    return {"Authorization": f"Bearer {key}"}


def mint_keys_over_http(
    http: httpx.Client, principals: Mapping[str, tuple[str, bool]], admin: str | None = None
) -> dict[str, str]:
    """name → (role, may read payloads): each principal created through the API (as
    ``admin``'s key, or with the client's own header), with one key: name → that key."""
    headers = bearer(admin) if admin is not None else None
    made = {}
    for name, (role, payloads) in principals.items():
        body = {"name": name, "role": role, "payloads": payloads}
        created = http.post("/v1/principals", json=body, headers=headers)
        assert created.status_code == 201, created.text
        minted = http.post(f"/v1/principals/{name}/keys", json={}, headers=headers)
        assert minted.status_code == 201, minted.text
        made[name] = str(minted.json()["key"])
    return made


@contextmanager
def api_deployment(
    pg_template: str,
    tmp: Path,
    *,
    env: Mapping[str, str] | None = None,
    api_env: Mapping[str, str] | None = None,
    namespaces: Sequence[str] = ("default",),
    port: int | None = None,
) -> Iterator[Deployment]:
    """Every process gets ``env``; the API process ``api_env`` too (its keys), and
    ``port`` (a free one if None: given, when another service must know it first). The
    test workflows are registered in each of ``namespaces`` (definitions are namespaced):
    by every process at start in the first, by the test's client in the others."""
    env = {"CAIRN_WORKFLOWS_NAMESPACE": namespaces[0], **(env or {})}
    name = f"cairn_t_{uuid.uuid4().hex[:12]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    try:
        with redis_pair() as (broker, leases):
            yield from _deployment(
                name, broker, leases, tmp, env, api_env or {}, namespaces[1:], port
            )
    finally:
        drop(name)


def _deployment(  # noqa: PLR0917 - one deployment's parts, each named
    name: str,
    broker: str,
    leases: str,
    tmp: Path,
    env: Mapping[str, str],
    api_env: Mapping[str, str],
    more_namespaces: Sequence[str],
    port: int | None,
) -> Iterator[Deployment]:
    full = {key: value for key, value in os.environ.items() if not key.startswith("CAIRN_")}
    full.update(FAST)
    full.update(
        {
            "CAIRN_DATABASE_URL": db_url(name),
            "CAIRN_BROKER_URL": broker,
            "CAIRN_REDIS_URL": leases,
            "CAIRN_WORKFLOWS": str(WORKFLOWS),
            "CAIRN_HOME": str(tmp / "home"),
            "PYTHONPATH": str(ROOT),
            **env,
        }
    )
    settings = Settings.from_env({k: v for k, v in full.items() if k.startswith("CAIRN_")})
    logs = tmp / "logs"
    logs.mkdir()
    cluster = Cluster(settings, full, logs, tmp / "ledger.txt")
    if port is None:
        (port,) = free_ports(1)
    try:
        cluster.worker(concurrency=2)
        cluster.scheduler()
        cluster.spawn("api", f"--port={port}", env=dict(api_env))
        base_url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(f"{base_url}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        cluster.wait_for(ready, timeout_s=30, what="the API to be ready")
        for namespace in more_namespaces:
            cluster.client.register(WORKFLOWS, namespace=namespace)
        yield Deployment(cluster, base_url)
    finally:
        cluster.stop()
