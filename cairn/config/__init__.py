"""One settings object, read from ``CAIRN_*`` environment variables.

Defaults run on a laptop with no services: a SQLite file under ``CAIRN_HOME`` and an
in-process broker and leases. Setting ``CAIRN_DATABASE_URL``, ``CAIRN_REDIS_URL`` and
``CAIRN_BROKER_URL`` moves the same commands onto PostgreSQL, Redis and Celery.

A ``CAIRN_*`` variable that is not a setting is an error, not silently ignored: a typo
in ``CAIRN_LEASE_TLL`` must not leave a fleet on a default nobody chose.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from cairn.errors import ConfigError

ENV_PREFIX = "CAIRN_"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    home: Path = Field(
        default=Path.home() / ".cairn", description="Where the embedded default keeps its files."
    )
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; unset means SQLite under CAIRN_HOME."
    )
    redis_url: str | None = Field(
        default=None, description="Redis for leases and heartbeats; unset means in-process."
    )
    broker_url: str | None = Field(
        default=None, description="Celery broker; unset means an in-process broker."
    )
    workflows: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated definition files, directories and Python modules.",
    )
    log_level: str = Field(default="INFO", description="Python logging level.")

    @field_validator("workflows", mode="before")
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError(f"unknown log level {value!r}")
        return level

    @property
    def embedded(self) -> bool:
        """True when no external service is configured: the laptop default."""
        return self.database_url is None and self.broker_url is None

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'cairn.db'}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read settings; raise :class:`ConfigError` on unknown variables or bad values."""
        environ = os.environ if environ is None else environ
        known = {f"{ENV_PREFIX}{name.upper()}" for name in cls.model_fields}
        unknown = sorted(key for key in environ if key.startswith(ENV_PREFIX) and key not in known)
        if unknown:
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hints.append(f"{key} (did you mean {close[0]}?)" if close else key)
            raise ConfigError(
                f"unknown setting(s): {', '.join(hints)}; known: {', '.join(sorted(known))}"
            )
        values = {
            name: environ[f"{ENV_PREFIX}{name.upper()}"]
            for name in cls.model_fields
            if f"{ENV_PREFIX}{name.upper()}" in environ
        }
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{ENV_PREFIX}{'.'.join(map(str, err['loc'])).upper()}: {err['msg']}"
                for err in exc.errors()
            )
            raise ConfigError(f"invalid settings: {problems}") from exc

    def describe(self) -> dict[str, Any]:
        """Effective settings for display, with passwords in URLs masked."""
        data = self.model_dump(mode="json")
        data["effective_database_url"] = self.effective_database_url
        for key in ("database_url", "redis_url", "broker_url", "effective_database_url"):
            if data.get(key):
                data[key] = _mask_password(data[key])
        return data


def _mask_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


__all__ = ["ENV_PREFIX", "Settings"]
