"""Leases: Redis claims with token-checked renewal, fencing tokens and heartbeats.

Empty until the worker fleet is built on it; see ``docs/architecture.md``.
"""
