"""Workloads for the simulator: trace readers, synthetic arrivals and lengths, transforms.

Entry point: :func:`load_workload`. See docs/workloads.md for formats, generators and their sources.
"""

from superinfer.sim.workload.loader import load_workload
from superinfer.sim.workload.spec import RequestSpec, SkippedLine, Workload, WorkloadError

__all__ = ["RequestSpec", "SkippedLine", "Workload", "WorkloadError", "load_workload"]
