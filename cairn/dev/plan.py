"""What ``cairn dev`` runs, and with which settings: decided once, before any child starts.

Every child gets the same ``CAIRN_*`` environment — the user's, with the dev defaults
under it — so that the worker, the scheduler and the API agree on the database, the
broker and the definitions. The supervisor reads the children's lines as JSON
(``CAIRN_LOG_FORMAT=json``) and renders them itself.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cairn.config import ENV_PREFIX, Settings
from cairn.dev.advert import HOME_DIR, KEY_FILE
from cairn.errors import InvalidInput

# Where the embedded default keeps the dev database, the artifacts and the dev key: in
# the project, not in ~/.cairn, so that each project's development runs stay its own.
DEV_HOME: Final = HOME_DIR
KEY_PREFIX: Final = "cairn-dev-"
# Shorter than production's: a worker restarted by a reload loses the steps it held,
# and the developer waits for their recovery. Applied only when the user set none of
# them: one of them alone could break the rule that binds them (renewal <= TTL/3).
DEV_DEFAULTS: Final = {
    "CAIRN_LEASE_TTL": "6",
    "CAIRN_HEARTBEAT_INTERVAL": "2",
    "CAIRN_RECOVERY_AFTER": "5",
}


@dataclass(frozen=True)
class DevPlan:
    settings: Settings
    env: dict[str, str]  # every child's environment
    api_key: str
    host: str
    port: int
    watch: tuple[Path, ...]
    project: Path

    @property
    def roles(self) -> tuple[str, ...]:
        """The children. Without a broker (the embedded default) one process runs them
        all: the worker's in-process queue is fed by the scheduler's relay, and its leases
        and heartbeats live in its memory, where the API must read them (a run's page,
        ``cairn status``, the fleet); a reload restarts it whole."""
        if self.settings.broker_url is None:
            return ("worker",)
        return ("worker", "scheduler", "api")

    @property
    def embedded(self) -> bool:
        return self.settings.broker_url is None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host == "localhost"


def make_plan(
    *,
    workflows: Sequence[str],
    host: str,
    port: int,
    watch: Sequence[Path],
    project: Path,
    environ: Mapping[str, str],
) -> DevPlan:
    """The plan for ``cairn dev`` run in ``project`` with ``environ``; :class:`InvalidInput`
    when there is nothing to run or a setting is wrong."""
    env = {key: value for key, value in environ.items() if not key.startswith(ENV_PREFIX)}
    cairn_env = _cairn_vars(environ)
    if not DEV_DEFAULTS.keys() & cairn_env.keys():
        cairn_env.update(DEV_DEFAULTS)
    if workflows:
        cairn_env["CAIRN_WORKFLOWS"] = ",".join(workflows)
    if not cairn_env.get("CAIRN_WORKFLOWS"):
        raise InvalidInput(
            "cairn dev: no workflows to run; name them with --workflows (YAML files, "
            "directories or Python modules) or set CAIRN_WORKFLOWS"
        )
    cairn_env.setdefault("CAIRN_HOME", str(project / DEV_HOME))
    cairn_env["CAIRN_LOG_FORMAT"] = "json"  # for the supervisor to read; it renders
    missing = [str(path) for path in watch if not path.is_dir()]
    if missing:
        raise InvalidInput(f"cairn dev: --watch {', '.join(missing)}: not a folder")
    settings = Settings.from_env(cairn_env)
    key = dev_key(settings.home)
    # The dev key beside the user's own keys, never instead of them.
    mine = f"{settings.workflows_namespace}:{key}"
    given = cairn_env.get("CAIRN_API_KEYS")
    cairn_env["CAIRN_API_KEYS"] = f"{given},{mine}" if given else mine
    env.update(cairn_env)
    env["PYTHONUNBUFFERED"] = "1"  # a handler's print() shows when it is printed
    return DevPlan(
        settings=Settings.from_env(cairn_env),
        env=env,
        api_key=key,
        host=host,
        port=port,
        watch=tuple(path.resolve() for path in (watch or [project])),
        project=project,
    )


def _cairn_vars(environ: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in environ.items() if key.startswith(ENV_PREFIX)}


def dev_key(home: Path) -> str:
    """The project's development API key: made once, kept readable by its owner only in
    ``home``, so that a browser signed in to the console stays signed in across restarts."""
    path = home / KEY_FILE
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    home.mkdir(parents=True, exist_ok=True)
    key = KEY_PREFIX + secrets.token_urlsafe(24)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(key + "\n")
    return key


def prepare(plan: DevPlan) -> str:
    """Migrate the dev database (Alembic, as ``cairn db upgrade`` does) and register the
    definitions, before any child starts: a definition that does not load stops
    ``cairn dev`` at once with every fault named, not three children each failing. The
    schema revision reached."""
    from cairn.runtime import register_definitions  # noqa: PLC0415 - the engine, when run
    from cairn.store.database import current_revision, make_engine, upgrade  # noqa: PLC0415

    engine = make_engine(plan.settings.effective_database_url)
    try:
        upgrade(engine)
        revision = current_revision(engine)
    finally:
        engine.dispose()
    register_definitions(plan.settings)
    return revision or "none"
