"""The definition language: the file form and the Python builder, compiled to the model
(:mod:`cairn.model.definition`) and validated — every fault at once."""
