"""Simulation backend: a discrete-event twin of the serving engine (design §6).

Submodules: ``models`` and ``hardware`` (cited profiles), ``costmodel`` (per-iteration roofline and
transfer times), ``calibration`` (measured coefficients that override the datasheet leads),
``workload`` (trace readers and synthetic generators). Nothing heavy is imported here.
"""
