"""Benchmarks: figures printed against a baseline measured in the same run. Not tests."""
