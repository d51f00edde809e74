"""RotaSched core: pure policy (VLT, Largest-VLT-First planning, KV tier accounting, baselines).

Imports neither torch nor vLLM. Engine adapters (``superinfer.sim``, ``superinfer.vllm``) build a
:class:`Snapshot`, ask a :class:`Policy` for a :class:`Plan` and apply it.
"""

from superinfer.core.blocks import BlockPool, KVLedger, PoolExhausted
from superinfer.core.budget import (B_XFER_BOUNDS, LIVE_BOUNDS, LIVE_INTEGER, b_xfer_blocks, batch_token_budget,
                                    slo_token_budget)
from superinfer.core.gate import PlanGate, batch_holds, decided_nothing
from superinfer.core.knobs import KNOB, KNOBS, Knob, KnobError, check_knob, check_number
from superinfer.core.planner import nothing_to_plan
from superinfer.core.policies import (
    ENGINE_POLICIES,
    HBM_ONLY_POLICIES,
    POLICIES,
    ROTATING_POLICIES,
    Policy,
    budgeted,
    core_policy_name,
    get_policy,
    ranking,
)
from superinfer.core.state import EngineState, Finished, Moves, Sampled
from superinfer.core.table import RequestTable
from superinfer.core.types import (
    FRESH_RESIDENCY,
    INTEGER_PARAMS,
    PARAM_DEFAULTS,
    PARAM_BOUNDS,
    Capacity,
    Params,
    Phase,
    Plan,
    Snapshot,
    Tenant,
    TenantTable,
    VictimMode,
    rank_order,
)
from superinfer.core.vlt import compute_vlt

__all__ = [
    "B_XFER_BOUNDS",
    "LIVE_BOUNDS",
    "LIVE_INTEGER",
    "KNOB",
    "KNOBS",
    "Knob",
    "KnobError",
    "check_knob",
    "check_number",
    "INTEGER_PARAMS",
    "PARAM_DEFAULTS",
    "ENGINE_POLICIES",
    "HBM_ONLY_POLICIES",
    "budgeted",
    "FRESH_RESIDENCY",
    "PARAM_BOUNDS",
    "POLICIES",
    "BlockPool",
    "Capacity",
    "EngineState",
    "Finished",
    "KVLedger",
    "Moves",
    "Params",
    "Phase",
    "Plan",
    "Policy",
    "PoolExhausted",
    "ROTATING_POLICIES",
    "RequestTable",
    "Sampled",
    "Snapshot",
    "Tenant",
    "TenantTable",
    "VictimMode",
    "b_xfer_blocks",
    "batch_token_budget",
    "compute_vlt",
    "core_policy_name",
    "get_policy",
    "nothing_to_plan",
    "PlanGate",
    "batch_holds",
    "decided_nothing",
    "rank_order",
    "ranking",
    "slo_token_budget",
]
