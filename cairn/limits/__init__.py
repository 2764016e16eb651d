"""Flow control, one package: what a definition's limits mean, their ports, the backends
that keep them fleet-wide in Redis or in one process's memory, and the worker's side of
them. None of it imports the engine's write path nor Celery (import contracts in
pyproject.toml); the engine and the worker import it.

- :mod:`~cairn.limits.concurrency`: the pools an execution takes a slot of, and
  ``Slots``, their port (the slots are held by node leases, so their backends are the
  lease's: :mod:`cairn.lease.slots`; parking and waking is the engine's
  :class:`~cairn.engine.slots.SlotGate`);
- :mod:`~cairn.limits.rates`: rate buckets, the calls' reservations and ``Rates``, their
  port; :mod:`~cairn.limits.rate_buckets`: ``RedisRates`` (``scripts/take_rate.lua``,
  ``scripts/rate_report.lua``) and ``MemoryRates``;
- :mod:`~cairn.limits.circuits`: circuit breaking and ``Circuits``, its port;
  :mod:`~cairn.limits.circuit_state`: ``RedisCircuits`` (``scripts/circuit_*.lua``) and
  ``MemoryCircuits``;
- :mod:`~cairn.limits.limiter` and :mod:`~cairn.limits.departures`: a model call's
  buckets taken before it is sent and confirmed as its request leaves.

Each port's backends answer one contract suite, shipped in :mod:`cairn.testing`
(``SlotsContract``, ``RatesContract``, ``CircuitsContract``).
"""
