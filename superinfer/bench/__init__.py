"""Benchmarks and measurement tools behind `superinferd bench ...` and `superinferd calibrate` that are not
part of a subsystem's runtime: sched (and sched_vllm), twin/ (`bench sim` and `bench figures`), kv/ (`bench
kv`), tuner/ (`bench tuner`), engine/ (the real-engine benchmark), fidelity/ (the twin against the engine),
costmodel/ (the twin against GPU profiles). Only ``superinfer.cli`` imports this package
(tests/test_structure.py)."""
