"""One node message, in stages: the worker's half of the write path.

1. :mod:`~cairn.workers.step.read` — skip what is already done: the idempotency row
   finished, a newer attempt exists, or the run ended. A run being cancelled turns a
   queued node into a no-op (its cancel committed holding the lease).
2. :mod:`~cairn.workers.step.admit` — take the lease (an older attempt's is superseded);
   its dependencies' circuits and its concurrency pools say whether it may run now
   (an irreversible node waits for its slots here, before its one claim).
3. :mod:`~cairn.workers.step.hold` — record the claim where it must be; a takeover from a
   holder that died counts a recovery, and may not run at all (a poison node, an
   irreversible one); a claim after a lapsed one is resumed; a reversible node's slots;
   the heartbeat that keeps the lease alive.
4. :mod:`~cairn.workers.step.execute` — run the handler on the restored state with a
   step context and its recorders, held to its node's timeout; a fused successor is
   admitted and executed the same way, under the chain's claim.
5. :mod:`~cairn.workers.step.commit` — commit the results and the run's next step in one
   transaction, unless the lease was lost meanwhile.
6. :mod:`~cairn.workers.step.release` — stop the heartbeat, release the lease
   (token-checked) and the slots; say how the message ended.

Each stage returns the next stage's input, or a :class:`Handled` that ends the message
(:meth:`cairn.workers.runner.NodeRunner.step` reads as this list)."""

from cairn.workers.step.handled import Handled

__all__ = ["Handled"]
