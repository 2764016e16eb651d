"""The contract a :class:`~cairn.limits.rates.Rates` backend keeps: subclass
:class:`RatesContract` as ``Test...`` beside a ``rates`` fixture yielding a fresh backend
(``tests/contract/test_rates.py`` runs it on memory and Redis). Periods are a fraction
of a second here (a limit's ``Rate`` takes any period), so the suite is quick."""

from __future__ import annotations

import time

from cairn.limits.rate_buckets import leave_within_ms, period_ms
from cairn.limits.rates import Bucket, Rates
from cairn.model.definition import Rate

PERIOD = 0.4
GUARDED = period_ms(PERIOD) / 1000  # when a unit comes back, its guard included
SLACK = 0.06  # the backend's clock and this process's, a call apart


def _go(rates: Rates, buckets: list[Bucket], call: str, tokens: int = 0) -> float:
    """Take, sleep as told, confirm: the seconds it waited."""
    began = time.monotonic()
    while (wait := rates.take(buckets, call, tokens)) > 0:
        time.sleep(wait)
    return time.monotonic() - began


class RatesContract:
    def test_a_window_lets_its_limit_through_then_queues_the_rest(self, rates: Rates) -> None:
        """Three requests per period: three go at once; the next three are each given
        the time the unit they need comes back — in the order they came — and a
        confirmation before that time is told to wait the rest."""
        bucket = [Bucket("ns/openai", requests=Rate(3, PERIOD))]
        assert [rates.take(bucket, f"c{n}", 0) for n in range(3)] == [0.0, 0.0, 0.0]
        waits = [rates.take(bucket, f"c{n}", 0) for n in range(3, 6)]
        assert all(GUARDED - SLACK <= w <= GUARDED for w in waits), waits
        assert rates.take(bucket, "c6", 0) > GUARDED + PERIOD - SLACK  # the next period's
        assert 0 < rates.take(bucket, "c3", 0) <= GUARDED  # too early: wait the rest
        (report,) = rates.report(["ns/openai"])
        assert (report.requests_limit, report.requests_used, report.waiting) == (3, 3, 4)
        assert report.requests_available == 0 and report.tokens_limit is None
        time.sleep(waits[0])
        assert rates.take(bucket, "c3", 0) == 0.0  # its time has come: confirmed

    def test_a_confirmation_too_late_for_its_units_takes_them_anew(self, rates: Rates) -> None:
        """A call that confirms its units more than half a guard after their time (it
        was slow to leave) may not use them then: they are taken anew, at the time it
        now leaves — and the next caller waits a period from that time, not the old."""
        bucket = [Bucket("ns/late", requests=Rate(1, PERIOD))]
        assert leave_within_ms(bucket) == 20  # half the guard of a 0.4 s period (40 ms)
        assert rates.take(bucket, "a", 0) == 0.0
        assert rates.take(bucket, "a", 0) == 0.0  # confirmed at once: still its time
        time.sleep(0.1)  # past half the guard (0.02 s)
        assert rates.take(bucket, "a", 0) == 0.0  # too late for its units: taken anew, now
        wait = rates.take(bucket, "b", 0)
        assert GUARDED - SLACK <= wait <= GUARDED, wait  # a period from a's new time
        time.sleep(wait + 0.1)  # b oversleeps its turn: it is taken anew too
        assert rates.take(bucket, "b", 0) == 0.0
        assert GUARDED - SLACK <= rates.take(bucket, "c", 0) <= GUARDED

    def test_never_more_than_the_limit_in_any_window(self, rates: Rates) -> None:
        bucket = [Bucket("ns/k", requests=Rate(2, PERIOD))]
        gone = []
        for n in range(6):
            _go(rates, bucket, f"c{n}")
            gone.append(time.monotonic())
        for first, third in zip(gone, gone[2:], strict=False):
            assert third - first >= PERIOD, gone  # the third of any window waits it out
        assert gone[-1] - gone[0] >= 2 * PERIOD

    def test_tokens_are_charged_what_the_call_used(self, rates: Rates) -> None:
        """1,000 tokens a period: a call reserving 800 leaves room for no other of 800
        — until its usage comes in at 150 (a refund: the next goes at once); a call
        whose usage is far over its reservation makes the next wait out the period."""
        bucket = [Bucket("ns/tpm", tokens=Rate(1000, PERIOD))]
        assert rates.take(bucket, "a", 800) == 0.0
        assert rates.take(bucket, "b", 800) > 0  # no room: given a later time
        rates.give_back(["ns/tpm"], "b")  # (it changed its mind: never sent)
        rates.settle(["ns/tpm"], "a", 150)
        (report,) = rates.report(["ns/tpm"])
        assert (report.tokens_used, report.tokens_available, report.waiting) == (150, 850, 0)
        assert rates.take(bucket, "c", 800) == 0.0
        rates.settle(["ns/tpm"], "c", 2500)  # used far more than it reserved
        assert rates.take(bucket, "d", 10) > GUARDED - SLACK
        # A reservation over the whole limit waits for an empty window, and takes it all.
        assert rates.take([Bucket("ns/small", tokens=Rate(100, PERIOD))], "e", 5000) == 0.0
        (small,) = rates.report(["ns/small"])
        assert small.tokens_used == 100

    def test_several_buckets_give_one_time_for_all(self, rates: Rates) -> None:
        tenant = Bucket("ns/state.tenant=acme", requests=Rate(5, PERIOD))
        key = Bucket("ns/openai", requests=Rate(1, PERIOD), tokens=Rate(10_000, PERIOD))
        assert rates.take([tenant, key], "a", 100) == 0.0
        wait = rates.take([tenant, key], "b", 100)
        assert GUARDED - SLACK <= wait <= GUARDED  # the tightest bucket decides
        (acme,) = rates.report(["ns/state.tenant=acme"])
        assert (acme.requests_used, acme.waiting) == (1, 1)  # held in both, for then
        # A bucket serves its callers in the order they came: one that needs only the
        # tenant's, which has room, still goes after the one given a time before it.
        assert 0 < rates.take([tenant], "c", 0) <= wait

    def test_a_pause_holds_every_caller_of_the_bucket(self, rates: Rates) -> None:
        """A 429 pauses the bucket: a new caller is given the pause's end; one that was
        given an earlier time before the pause came is moved after it when it confirms."""
        bucket = [Bucket("ns/paused", requests=Rate(1, PERIOD))]
        assert rates.take(bucket, "a", 0) == 0.0
        early = rates.take(bucket, "b", 0)  # its turn: a period on
        assert 0 < early <= GUARDED
        rates.pause(["ns/paused"], 1.0)
        (report,) = rates.report(["ns/paused"])
        assert 1.0 - SLACK <= report.paused_for_s <= 1.0
        assert 1.0 - SLACK <= rates.take(bucket, "c", 0) <= 1.0 + GUARDED
        time.sleep(early)
        moved = rates.take(bucket, "b", 0)  # its time came, within the pause
        assert moved >= 1.0 - early - SLACK, moved
        rates.pause(["ns/paused"], 0.1)  # a shorter pause does not cut the longer one
        (report,) = rates.report(["ns/paused"])
        assert report.paused_for_s > 0.3

    def test_a_key_named_with_two_periods_keeps_the_longer_ones_units(self, rates: Rates) -> None:
        """Two definitions name one key, one with a long period and one with a short: a
        caller of the short one does not forget the units the long one counts."""
        long = [Bucket("ns/shared", requests=Rate(2, 3.0))]
        short = [Bucket("ns/shared", requests=Rate(5, PERIOD))]
        assert rates.take(long, "a", 0) == 0.0
        assert rates.take(long, "b", 0) == 0.0
        time.sleep(GUARDED + 0.05)
        assert rates.take(short, "c", 0) == 0.0  # the short window has room again
        assert rates.take(long, "d", 0) > 2.0  # the long one still holds a and b (and c)
