"""Benchmarks behind `superinferd bench ...` that are not owned by one subsystem."""
