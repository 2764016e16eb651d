"""The settings read by cairn's clients rather than its processes — the HTTP client and
the ``cairn`` command itself. They are settings all the same, so that a process with one
of them set (a handler calling the API, a worker started from a shell that preloads) is
not refused as misspelt. :class:`~cairn.config.Settings` inherits them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class ClientSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    api_url: str | None = Field(
        default=None,
        description="Where `cairn.http` clients find the API; read by the client itself "
        "(a setting so that a process with it set, a handler calling the API, is not refused).",
    )
    api_key: SecretStr | None = Field(
        default=None, description="The API key `cairn.http` clients send (read by the client)."
    )
    cli_preload: bool = Field(
        default=True,
        description="Hand each `cairn` command to the user's preloaded command line, which "
        "has imported what commands use (docs/cli.md#the-preloaded-command-line); read by "
        "the `cairn` command itself. `0` runs every command in a process of its own.",
    )
    cli_preload_idle_s: float = Field(
        default=900.0,
        gt=0,
        description="Seconds the preloaded command line waits for a command before it ends.",
    )
