"""Handlers and guards for ``examples/book_flight.yaml``.

Handlers take the step context (``cairn.StepContext``) and the run state
(``cairn.State``) and return what to merge into the state. The fare table stands in for a
flight search API; the other handlers stand in for a booking system, a mail service, an
SMS gateway and a model that classifies the customer's follow-up message.
"""

from __future__ import annotations

from cairn import State, StepContext

APPROVAL_THRESHOLD_EUR = 500

FARES_EUR = {
    ("BER", "LIS"): 189,
    ("BER", "NRT"): 1240,
    ("FRA", "JFK"): 612,
    ("MUC", "BCN"): 95,
}


def search(ctx: StepContext, state: State) -> State:
    route = (state["origin"], state["destination"])
    if route not in FARES_EUR:
        return {"offers": []}
    flight = f"CX{sum(map(ord, ''.join(route))) % 900 + 100}"
    return {"offers": [{"flight": flight, "fare_eur": FARES_EUR[route]}]}


def quote(ctx: StepContext, state: State) -> State:
    offers = state.get("offers") or []
    cheapest = min(offers, key=lambda offer: offer["fare_eur"]) if offers else None
    seats = int(state.get("passengers", 1))
    total = cheapest["fare_eur"] * seats if cheapest else None
    return {"selected": cheapest, "total_eur": total}


def is_cheap(state: State) -> bool:
    total = state.get("total_eur")
    return total is not None and total <= APPROVAL_THRESHOLD_EUR


def page_manager(ctx: StepContext, state: State) -> State:
    pages = int(state.get("manager_pages", 0)) + 1
    return {"manager_pages": pages}


def reserve(ctx: StepContext, state: State) -> State:
    selected = state["selected"]
    return {"booking": f"PNR-{selected['flight']}-{state['origin']}{state['destination']}"}


def release_seat(ctx: StepContext, state: State) -> State:
    return {"booking": None, "released": state.get("booking")}


def send_email(ctx: StepContext, state: State) -> State:
    return {"emailed": state.get("email", "customer@example.com")}


def send_sms(ctx: StepContext, state: State) -> State:
    return {"texted": state.get("phone", "+00 000 000")}


def classify(ctx: StepContext, state: State) -> State:
    message = str(state.get("follow_up", "")).lower()
    if "refund" in message or "money back" in message:
        return {"intent": "refund"}
    if "change" in message or "rebook" in message:
        return {"intent": "change"}
    return {"intent": "none"}


def refund(ctx: StepContext, state: State) -> State:
    return {"refunded_eur": state.get("total_eur"), "booking": None}
