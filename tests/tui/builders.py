"""A /v1/state document shaped like the daemon's (docs/daemon.md), with knobs to vary, for unit tests."""

from __future__ import annotations

import copy
from typing import Any

BASE: dict[str, Any] = {
    "schema_version": 1, "backend": "sim", "simulation": True, "status": "ok", "version": "0.1.0", "pid": 100,
    "model": "superinfer-sim:qwen2.5-32b", "profile": "demo", "profile_path": "/x/demo.toml", "uptime_s": 10.0,
    "started_at": 1000.0,
    "params": {"alpha": 3.0, "delta_b": 0.0, "delta_f": 0.5, "min_residency": 4, "max_rotations": 64,
               "b_xfer": 815, "version": 1, "source": "profile", "updated_at": 1000.0, "file": "/x/params.json"},
    "probe": {"device": "cpu", "duplex_h2d_gbps": 12.5, "duplex_d2h_gbps": 10.6, "b_xfer_blocks": 201},
    "slo_window_s": 60.0,
    "tenants": {
        "chat": {"ttft_slo_s": 3.0, "tbt_slo_s": 0.15, "weight": 2.0, "priority": 0,
                 "window": {"requests": 30, "finished": 25, "ttft_attainment": 0.9, "tbt_attainment": 1.0,
                            "slo_attainment": 0.88, "tbt_gaps": 4000, "tbt_gap_attainment": 0.98, "rotations": 40,
                            "rotations_per_finished": 1.6, "ttft_p50_s": 1.2, "ttft_p99_s": 4.5,
                            "tbt_p50_s": 0.05, "tbt_p99_s": 0.3}},
        "voice": {"ttft_slo_s": 1.0, "tbt_slo_s": 0.1, "weight": 4.0, "priority": 0,
                  "window": {"requests": 4, "finished": 3, "ttft_attainment": 1.0, "tbt_attainment": 1.0,
                             "slo_attainment": 1.0, "tbt_gaps": 300, "tbt_gap_attainment": 1.0, "rotations": 0,
                             "rotations_per_finished": 0.0, "ttft_p50_s": 0.3, "ttft_p99_s": 0.5,
                             "tbt_p50_s": 0.05, "tbt_p99_s": 0.08}}},
    "queues": {"waiting": 5, "rotary": 2, "running": 12, "inflight_http": 0},
    "kv": {"block_size": 16, "block_bytes": 4194304, "hbm": {"used": 1000, "total": 1085},
           "dram": {"used": 1200, "total": 4096}},
    "transfer": {"h2d": {"gbps": 1.5, "busy_share": 0.06, "bytes_total": 0, "seconds_total": 0.0},
                 "d2h": {"gbps": 0.4, "busy_share": 0.02, "bytes_total": 0, "seconds_total": 0.0}, "window_s": 15.0},
    "counters": {"arrived": 100, "finished": 80, "rejected": 0, "aborted": 0, "preemptions": 50, "rotations": 50,
                 "recompute_fallbacks": 0, "swap_ins": 48, "h2d_blocks": 0, "d2h_blocks": 0},
    "ranking": [{"req_id": 7, "tenant": "chat", "phase": "waiting", "vlt_s": 2.5, "age_s": 8.0}],
    "rotation_events": [],
    "planner": {"last_s": 0.0001, "mean_s": 0.0001, "iterations": 100},
}


def state(**changes: Any) -> dict[str, Any]:
    """A copy of :data:`BASE`; ``changes`` set top-level keys, ``counters__x=1`` style keys set nested ones."""
    s = copy.deepcopy(BASE)
    for key, value in changes.items():
        if "__" in key:
            outer, inner = key.split("__", 1)
            s[outer][inner] = value
        else:
            s[key] = value
    return s


def rot_event(t: float, req_id: int, kind: str = "swap_out", tenant: str = "chat") -> dict[str, Any]:
    return {"time": t, "sim_time_s": t - 900.0, "kind": kind, "req_id": req_id, "tenant": tenant, "blocks": 3,
            "forced": False, "dropped_tail": False}
