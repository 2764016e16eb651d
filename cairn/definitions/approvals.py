"""A wait's approval keys, read and checked when a definition loads:

```yaml
review:
  wait:
    signals: {approve: publish, reject: rejected}
    timeout: 1d
    on_timeout: escalate
    approvers: [role:approver, alice]   # who may decide (role:X: that role or higher)
    quorum: 2                           # distinct principals a signal needs
    response:                           # a JSON Schema per signal, for its payload
      approve: {type: object, required: [answer], properties: {answer: {type: string}}}
    context: {fields: [answer, question], messages: 3, budget: true}
    accept_early: false                 # keep a signal sent before the wait opens
```

Each a named fault when it is wrong: a role that does not exist, a quorum its named
approvers cannot reach, a schema that is not one or for a signal the wait does not
take, early signals on a wait with approvers (nobody approves what nobody has seen).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cairn.definitions import format as fmt
from cairn.definitions.reader import Reader
from cairn.model.definition import WaitContext

ROLES = ("viewer", "approver", "operator", "admin")
# role:<role>, a principal's name, or <kind>:<name>.
_APPROVER = re.compile(
    r"role:(?:viewer|approver|operator|admin)|(?:(?:key|person|db):)?[A-Za-z0-9][A-Za-z0-9._@-]{0,199}"
)


def approval_keys(
    reader: Reader, node_id: str, spec: Mapping[str, Any], signals: Mapping[str, str]
) -> dict[str, Any]:
    """The WaitNode fields of ``spec``'s approval keys (see the module)."""
    approvers = _approvers(reader, node_id, spec.get("approvers"))
    quorum = reader.positive_int(spec.get("quorum"), "wait.quorum", node_id) or 1
    named = [a for a in approvers if not a.startswith("role:")]
    if approvers and len(named) == len(approvers) and quorum > len(named):
        reader.fault(
            "bad_value",
            f"wait.quorum {quorum} needs more principals than its approvers name ({len(named)})",
            node_id,
        )
    accept_early = spec.get("accept_early", False)
    if not isinstance(accept_early, bool):
        reader.fault("bad_value", "wait.accept_early is true or false", node_id)
        accept_early = False
    if accept_early and approvers:
        reader.fault(
            "early_approval",
            "a wait with approvers never accepts early signals: nobody approves what "
            "nobody has seen",
            node_id,
        )
    return {
        "approvers": approvers,
        "quorum": quorum,
        "response": _responses(reader, node_id, spec.get("response"), signals),
        "context": _context(reader, node_id, spec.get("context")),
        "accept_early": accept_early,
    }


def _approvers(reader: Reader, node_id: str, raw: object) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        reader.fault("bad_value", "wait.approvers is a non-empty list", node_id)
        return ()
    found = []
    for entry in raw:
        if not isinstance(entry, str) or not _APPROVER.fullmatch(entry):
            reader.fault(
                "bad_value",
                f"wait.approvers: {entry!r} is neither role:<{'|'.join(ROLES)}> nor a "
                "principal (name, key:name, person:name)",
                node_id,
            )
            continue
        found.append(entry)
    return tuple(found)


def _responses(
    reader: Reader, node_id: str, raw: object, signals: Mapping[str, str]
) -> dict[str, Mapping[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        reader.fault("bad_value", "wait.response maps a signal to its JSON Schema", node_id)
        return {}
    found: dict[str, Mapping[str, Any]] = {}
    for name, schema in raw.items():
        if name not in signals:
            reader.fault(
                "bad_value",
                f"wait.response names signal {name!r}; the wait takes {sorted(signals)}",
                node_id,
            )
            continue
        # Imported for a definition that declares a response schema, not for every one.
        from jsonschema import Draft202012Validator  # noqa: PLC0415
        from jsonschema.exceptions import SchemaError  # noqa: PLC0415

        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            reader.fault(
                "bad_schema", f"wait.response.{name} is not a JSON Schema: {exc.message}", node_id
            )
            continue
        if not isinstance(schema, Mapping):
            reader.fault("bad_schema", f"wait.response.{name} is a JSON Schema object", node_id)
            continue
        found[str(name)] = dict(schema)
    return found


def _context(reader: Reader, node_id: str, raw: object) -> WaitContext | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        reader.fault("bad_value", "wait.context is {fields, messages, budget}", node_id)
        return None
    reader.closed(raw, fmt.WAIT_CONTEXT, "wait.context", node_id, where="wait.context")
    fields = raw.get("fields", [])
    if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
        reader.fault("bad_value", "wait.context.fields is a list of state fields", node_id)
        fields = []
    messages = raw.get("messages", 0)
    if isinstance(messages, bool) or not isinstance(messages, int) or not 0 <= messages <= 100:
        reader.fault("bad_value", "wait.context.messages is 0 to 100 (the last ones)", node_id)
        messages = 0
    budget = raw.get("budget", False)
    if not isinstance(budget, bool):
        reader.fault("bad_value", "wait.context.budget is true or false", node_id)
        budget = False
    return WaitContext(tuple(fields), messages, budget)
