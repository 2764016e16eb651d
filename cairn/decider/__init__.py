"""The pure core: ``decide(definition, state, event) -> Decision``.

``decide`` does no I/O and reads no clock: the time comes in on the event, retry jitter
is derived from the execution key, and the only code it runs besides its own is a
branch's guard (a pure function of the state, by the definition contract). It never
modifies ``state``. An event the run must refuse raises a
:class:`~cairn.errors.CairnError` subclass before anything is decided; an event that is
harmless but out of date comes back *ignored*, with the same state and the reason. Every
rule about how a run moves lives in this package, and nothing in it imports anything that
does I/O (checked by import-linter and a test).
"""

from cairn.decider.graph import Decision, decide
from cairn.decider.step import Transition

__all__ = ["Decision", "Transition", "decide"]
