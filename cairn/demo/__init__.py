"""``cairn demo``: a sequential agent skill run on the embedded default, crashed and resumed."""
