"""The settings of deployments: which build of the code a process is, and which earlier
builds it can take over (docs/versions.md). :class:`~cairn.config.Settings` inherits them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cairn.model.builds import build_id_problem


class BuildSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    build: str | None = Field(
        default=None,
        description="This process's build id; unset: '<cairn version>-<12 hex>', the hex "
        "a digest of the source files of the modules its workflows' handlers live in "
        "(docs/versions.md#builds).",
    )
    compatible_builds: list[str] = Field(
        default_factory=list,
        description="Comma-separated earlier builds this one can take over: the nodes of "
        "their `auto-upgrade` runs come to it (docs/versions.md).",
    )
    build_announce_s: float = Field(
        default=10.0,
        gt=0,
        description="How often a worker announces its build, seconds; a build not "
        "announced for three times this long is no longer live.",
    )

    @field_validator("compatible_builds", mode="before")
    @classmethod
    def _split_builds(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("build")
    @classmethod
    def _build_id(cls, value: str | None) -> str | None:
        if value is not None and (problem := build_id_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("compatible_builds")
    @classmethod
    def _build_ids(cls, value: list[str]) -> list[str]:
        for build in value:
            if (problem := build_id_problem(build)) is not None:
                raise ValueError(problem)
        return value
