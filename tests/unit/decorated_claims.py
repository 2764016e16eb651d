"""An expense claim declared with decorators (``tests/unit/test_decorators.py`` compiles
the same workflow from YAML and from the builder, naming these handlers, and compares).

Every kind of thing a definition holds is here: an input schema, a state schema, a
retrying task with a timeout, a branch on a guard, an approval wait with approvers and a
quorum, a bounded escalation loop, a compensation declared after its task, a parallel
fan-out with a critical join and a branch default, a routing decision with no handler,
two ends, and state keys that accumulate (reducers).
"""

from __future__ import annotations

import cairn
from cairn import State, StepContext

CLAIM_INPUT = {
    "type": "object",
    "required": ["employee", "amount_eur"],
    "properties": {
        "employee": {"type": "string", "minLength": 1},
        "amount_eur": {"type": "number", "exclusiveMinimum": 0},
        "category": {"enum": ["travel", "meals", "other"]},
    },
    "additionalProperties": False,
}
CLAIM_STATE = {
    "type": "object",
    "required": ["employee", "amount_eur"],
    "properties": {"amount_eur": {"type": "number"}, "reminded": {"type": "integer"}},
}

claims = cairn.workflow(
    "expense_claim",
    version=3,
    description="Receive, assess, approve if large, pay (undone on failure), notify.",
    input=CLAIM_INPUT,
    state=CLAIM_STATE,
    budget={"usd": 5},
    reducers={"reminded": "add", "notes": "append"},
)


@claims.task(next="assess_claim", retry={"attempts": 4, "backoff": "2s", "max_delay": "1m"})
def receive(ctx: StepContext, state: State) -> State:
    return {"received": True}


def is_small(state: State) -> bool:
    return bool(state["amount_eur"] <= 100)


@claims.task("assess_claim", branch={"guard": is_small, "cases": {True: "pay", False: "review"}})
def assess(ctx: StepContext, state: State) -> State:
    return {"assessed": True}


claims.wait(
    "review",
    signals={"approve": "pay", "reject": "refused"},
    timeout="48h",
    on_timeout="remind",
    approval={"approvers": ["role:approver"], "quorum": 2},
)


@claims.task(next="review", max_visits=2, timeout="30s")
def remind(ctx: StepContext, state: State) -> State:
    return {"reminded": 1, "notes": ["reminded"]}  # added to what the state holds


@claims.task(next="notify", on_error={"permanent": "refused"})
def pay(ctx: StepContext, state: State) -> State:
    return {"paid": state["amount_eur"]}


@claims.compensation("pay")
def claw_back(ctx: StepContext, state: State) -> State:
    return {"paid": None}


claims.parallel(
    "notify",
    ["email", "ledger"],
    join={"policy": "critical", "critical": ["ledger"]},
    next="file_claim",
)


@claims.task(default={"emailed": False})
async def email(ctx: StepContext, state: State) -> State:
    return {"emailed": True}


@claims.task()
def ledger(ctx: StepContext, state: State) -> State:
    return {"booked": True}


claims.node(
    "file_claim",
    route={"key": "category", "table": {"travel": "done", "meals": "done"}, "default": "done"},
)
claims.end("done")
claims.end("refused", "failed")
