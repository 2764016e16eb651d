"""The principals of writes that do not come through the API, and so present no key:

- ``db:<user>`` — the CLI and the Python client, writing to the database directly. Who
  holds the database's credentials may do anything cairn can; the name is the operating
  system's user running it, and every entry says so (``kind: db``). Operators without
  those credentials use the CLI's remote mode (``CAIRN_API_URL`` and a key).
- ``broker:<name>`` — runs submitted through the broker's submit tasks, accepted into
  one namespace only as an admin configured it (``CAIRN_BROKER_SUBMIT=name@namespace``);
  the message's own claims about where it belongs are not believed.
"""

from __future__ import annotations

import getpass
import re

from cairn.config import Settings
from cairn.errors import ConfigError
from cairn.model.principals import Principal, PrincipalKind, Role

ANY_NAMESPACE = "*"
_BROKER = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,99})@([A-Za-z0-9][A-Za-z0-9._-]{0,99})")


def db_principal() -> Principal:
    """The CLI's or the Python client's principal (any namespace, everything)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user database entry (a container's arbitrary uid)
        user = "unknown"
    return Principal(user, ANY_NAMESPACE, Role.ADMIN, PrincipalKind.DB, payloads=True)


def broker_principal(settings: Settings) -> Principal | None:
    """Who submits through the broker, as configured; None: nobody may."""
    if settings.broker_submit is None:
        return None
    found = _BROKER.fullmatch(settings.broker_submit.strip())
    if found is None:
        raise ConfigError(
            f"CAIRN_BROKER_SUBMIT is 'name@namespace', not {settings.broker_submit!r}"
        )
    name, namespace = found.groups()
    return Principal(name, namespace, Role.OPERATOR, PrincipalKind.BROKER)
