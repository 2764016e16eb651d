"""A test kit for cairn and for those who build on it: the decider driver (feed a
definition's commands back to ``decide``, choosing what happens next), a fake clock, and
the contract suites every backend of a port must pass — run them against your own."""
