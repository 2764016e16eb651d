"""Leases: Redis claims with token-checked renewal, fencing tokens, heartbeats, and the
fleet-wide lease metrics. See ``docs/leases.md``."""
