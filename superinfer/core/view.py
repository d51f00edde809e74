"""What an operator sees of a plan: the top of its VLT ranking, as ``/v1/state``'s ``ranking`` rows.

One function for the twin's daemon backend and the vLLM plugin, so ``superinferd top`` shows the same
thing whichever engine serves. A row is ``{req_id, tenant, phase, vlt_s, age_s}``: the phase and VLT the
plan saw, the age at the plan's time.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from superinfer.core.types import Phase, Plan, Snapshot, rank_order

PHASE_NAMES = tuple(p.name.lower() for p in Phase)  # index = int(Phase): waiting, rotary, running


def ranking_rows(plan: Plan | None, snap: Snapshot | None, at: float, tenant_name: Callable[[int], str], top: int,
                 key: Callable[[int], Hashable | None] | None = None) -> list[dict[str, Any]]:
    """The ``top`` first of ``plan``'s ranking (largest VLT first, :func:`rank_order`), ``snap`` the snapshot it
    was planned on at time ``at``. ``tenant_name``: a tenant index's name; ``key``: a core request id's public
    id (None: the request has left since, and its row is skipped); default the core id itself."""
    if plan is None or snap is None or plan.vlt_ids.shape[0] == 0:
        return []
    rows: list[dict[str, Any]] = []
    for i in rank_order(plan.vlt_values, plan.vlt_t_arr, plan.vlt_ids).tolist():
        rid = int(snap.req_id[i])
        public = rid if key is None else key(rid)
        if public is None:
            continue
        rows.append({"req_id": public, "tenant": tenant_name(int(snap.tenant[i])),
                     "phase": PHASE_NAMES[int(snap.phase[i])], "vlt_s": round(float(plan.vlt_values[i]), 6),
                     "age_s": round(at - float(snap.t_arr[i]), 6)})
        if len(rows) >= top:
            break
    return rows
