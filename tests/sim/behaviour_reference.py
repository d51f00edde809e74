"""The behaviour reference of the simulator: fixed-seed ``bench sim`` runs of every pinned policy.

``tests/sim/fixtures/behaviour_reference.json`` was written by this module *before* the structure
refactor (issue 9) and must stay byte-for-byte reproducible by any change that claims not to alter
behaviour: every counter and attainment of every run (wall-clock fields excluded). When RotaSched v2
became ``lvf`` (issue 10), the recorded ``lvf`` runs were renamed ``lvf-paper`` (the same algorithm
under its new name, still reproduced exactly) and the ``lvf-nooverlap`` runs dropped (it is now v2 on a
serial link); ``lvf`` itself is not pinned here, nor ``lvf-hbm`` (``lvf`` with no host tier). A change that alters a pinned policy on purpose
regenerates the file and says why in its commit::

    .venv/bin/python -m tests.sim.behaviour_reference --write
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from superinfer.core import Tenant, TenantTable
from superinfer.sim.run import RunSpec, run_one
from superinfer.sim.engine import SIM_POLICIES

PINNED = tuple(p for p in SIM_POLICIES if p not in ("lvf", "lvf-nooverlap", "lvf-hbm"))  # lvf and its engine variants

FIXTURE = Path(__file__).parent / "fixtures" / "behaviour_reference.json"
WALL_KEYS = ("wall_s", "sim_per_wall")

# Loaded points: HBM held to 1,500 blocks so that every policy preempts and lvf rotates; the second point
# has two tenants (weights, per-tenant SLOs) and bursty arrivals.
_TWO = TenantTable([Tenant("chat", 2.0, 0.08, 1.0), Tenant("batch", 8.0, 0.2, 2.0, priority=1)])
POINTS = (
    dict(workload="chat", arrival="poisson", rps=40.0, duration_s=20.0, hbm_blocks=1500, drain_s=60.0),
    dict(workload="sharegpt", arrival="gamma:0.5", rps=30.0, duration_s=15.0, hbm_blocks=1200, drain_s=60.0,
         tenants=_TWO, tenant_mix=(("chat", 0.7), ("batch", 0.3)), b_xfer=64),
)


def specs() -> list[RunSpec]:
    return [RunSpec(policy=p, seed=s, model="llama-3-8b", hardware="gh200", **point)  # type: ignore[arg-type]
            for point in POINTS for p in PINNED for s in (0, 1)]


def key(spec: RunSpec) -> str:
    return f"{spec.workload}/{spec.arrival}/{spec.rps}/{spec.policy}/seed{spec.seed}"


def run_all() -> dict[str, dict]:
    out = {}
    for spec in specs():
        res = run_one(spec)
        for k in WALL_KEYS:
            res.pop(k, None)
        out[key(spec)] = res
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="overwrite the fixture")
    args = ap.parse_args()
    result = run_all()
    if args.write:
        FIXTURE.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {FIXTURE} ({len(result)} runs)")
    else:
        print(json.dumps(result, indent=1, sort_keys=True))
