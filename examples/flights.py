"""Handlers and guards for ``examples/book_flight.yaml``.

Handlers take the step context and the run state and return what to merge into the
state. The fare table stands in for a flight search API; the other handlers stand in for
a booking system, a mail service, an SMS gateway and a model that classifies the
customer's follow-up message.
"""

from __future__ import annotations

from typing import Any

APPROVAL_THRESHOLD_EUR = 500

FARES_EUR = {
    ("BER", "LIS"): 189,
    ("BER", "NRT"): 1240,
    ("FRA", "JFK"): 612,
    ("MUC", "BCN"): 95,
}


def search(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    route = (state["origin"], state["destination"])
    if route not in FARES_EUR:
        return {"offers": []}
    flight = f"CX{sum(map(ord, ''.join(route))) % 900 + 100}"
    return {"offers": [{"flight": flight, "fare_eur": FARES_EUR[route]}]}


def quote(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    offers = state.get("offers") or []
    cheapest = min(offers, key=lambda offer: offer["fare_eur"]) if offers else None
    seats = int(state.get("passengers", 1))
    total = cheapest["fare_eur"] * seats if cheapest else None
    return {"selected": cheapest, "total_eur": total}


def is_cheap(state: dict[str, Any]) -> bool:
    total = state.get("total_eur")
    return total is not None and total <= APPROVAL_THRESHOLD_EUR


def page_manager(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    pages = int(state.get("manager_pages", 0)) + 1
    return {"manager_pages": pages}


def reserve(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    selected = state["selected"]
    return {"booking": f"PNR-{selected['flight']}-{state['origin']}{state['destination']}"}


def release_seat(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"booking": None, "released": state.get("booking")}


def send_email(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"emailed": state.get("email", "customer@example.com")}


def send_sms(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"texted": state.get("phone", "+00 000 000")}


def classify(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    message = str(state.get("follow_up", "")).lower()
    if "refund" in message or "money back" in message:
        return {"intent": "refund"}
    if "change" in message or "rebook" in message:
        return {"intent": "change"}
    return {"intent": "none"}


def refund(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    return {"refunded_eur": state.get("total_eur"), "booking": None}
