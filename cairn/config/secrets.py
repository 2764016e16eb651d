"""Secrets given per namespace (tenant): API keys, webhook signing secrets.

Both come as ``namespace:secret`` entries, comma-separated in an environment variable
and one a line in a file (``#`` comments), so that a Kubernetes Secret can be mounted as
either. Errors name the source and the namespace, never the secret: they end up in logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from pydantic import SecretStr

from cairn.errors import ConfigError

# Namespaces are stored in runs.namespace (100 characters) and appear in URLs and logs.
NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def secret_lines(
    value: SecretStr | None, variable: str, file: Path | None, file_variable: str
) -> list[tuple[str, str]]:
    """Every entry given, as (line, where it came from)."""
    lines: list[tuple[str, str]] = []
    if value is not None:
        lines.extend((entry, variable) for entry in value.get_secret_value().split(","))
    if file is not None:
        try:
            text = file.read_text()
        except OSError as exc:
            raise ConfigError(f"{file_variable}: cannot read it: {exc}") from exc
        lines.extend((line, str(file)) for line in text.splitlines())
    return lines


def namespaced(
    lines: Iterable[tuple[str, str]], what: str, min_length: int
) -> list[tuple[str, str, str]]:
    """Parse entries into (namespace, secret, source), skipping blanks and comments."""
    entries = []
    for raw, source in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        namespace, sep, secret = line.partition(":")
        namespace, secret = namespace.strip(), secret.strip()
        if not sep or not secret:
            raise ConfigError(f"{source}: {what} is 'namespace:{what}', got {namespace!r}:…")
        if not NAMESPACE.fullmatch(namespace):
            raise ConfigError(f"{source}: {namespace!r} is not a valid namespace name")
        if len(secret) < min_length:
            raise ConfigError(
                f"{source}: the {what} of namespace {namespace!r} is shorter than "
                f"{min_length} characters"
            )
        entries.append((namespace, secret, source))
    return entries
