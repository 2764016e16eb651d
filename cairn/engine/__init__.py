"""The engine: the write path of a step. It submits runs and advances them one event at
a time — lock, restore, decide, write the step, commit, then publish — through the store's
port and a :class:`~cairn.engine.outbox.Publisher`, never a backend.
:class:`~cairn.engine.orchestrator.Orchestrator` is its face."""
