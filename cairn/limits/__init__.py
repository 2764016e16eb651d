"""Flow control on the worker's side of a step: a model call's rate limits taken from
their buckets (:mod:`~cairn.limits.limiter`) and confirmed as its request leaves
(:mod:`~cairn.limits.departures`). The buckets' ports are the engine's
(:mod:`cairn.engine.rates`), their backends the lease's; none of it imports the engine's
write path nor Celery (an import contract in pyproject.toml)."""
