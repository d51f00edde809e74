"""The policies behind one interface: ``get_policy(name).plan(snapshot, capacity, params, tenants, now)``.

============== ===================================================================================
``fcfs``       vLLM V1 default: running requests in admission order, FCFS admission (preempted
               requests first), chunked prefill, newest-first recompute preemption, nothing admitted
               in a step that preempted. Also what ``vllm`` names in the benchmarks.
``vllm-offload`` ``fcfs`` that stores full blocks to DRAM as they fill and reloads them on resume
               instead of recomputing them (vLLM >= 0.33 ``--kv-offloading-size``); the unfinished
               tail is recomputed.
``priority``   vLLM's priority policy: admission by (priority, arrival); the victim is the running
               request with the largest (priority, arrival).
``sarathi``    stall-free batching: decodes first, prefill chunks within a small token budget.
``sjf``        shortest predicted remaining output first (oracle plus rank noise, standing in for a
               learned ranker); the victim is the longest predicted.
``lvf-paper``  RotaSched as the paper describes it: Largest-VLT-First with rotation under the transfer
               budget; FCFS (exactly the ``fcfs`` decisions, plus eager syncs) when every live request
               fits in HBM. Under overload it time-slices every live request (design §3.4).
``lvf``        RotaSched v2: ``lvf-paper`` whose rotation must pay for itself. A running request is a
               discretionary victim only with SLO slack >= ``slack_gate_s``, and only for a candidate
               whose VLT exceeds its own by more than ``rotation_margin_s``; waiting requests already
               past their TTFT SLO rank after the others and never displace (``hopeless_last``); a
               parked request's lag counts from its mean-TBT deadline with ``tbt_credit`` (banked slack
               credited up to S_F, :func:`~superinfer.core.vlt.compute_vlt`).
               Forced victims, budgets and the FCFS fallback are ``lvf-paper``'s.
``lvf-hbm``    (an engine variant) ``lvf`` on an engine with no host tier: every victim's KV is
               recomputed. Beside ``lvf`` it says what rotation itself adds.
============== ===================================================================================
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from superinfer.core.orders import Ctx, PolicySpec, fcfs_running, sort_rows, stream_desc
from superinfer.core.planner import build_plan, fits_in_hbm, only_serves_batch
from superinfer.core.types import Capacity, Params, Phase, Plan, Snapshot, TenantTable, rank_order
from superinfer.core.validate import validate_snapshot
from superinfer.core.vlt import compute_vlt


# ---- orderings ---------------------------------------------------------------------------------
def _admission_order(ctx: Ctx, rows: np.ndarray) -> np.ndarray:
    s = ctx.snap
    return fcfs_running(s.t_run, s.t_arr, s.req_id, rows)


def _newest_first(ctx: Ctx, rows: np.ndarray) -> np.ndarray:
    return _admission_order(ctx, rows)[::-1]


def _fcfs_candidates(ctx: Ctx, rows: np.ndarray) -> Iterator[np.ndarray]:
    """Preempted requests first (vLLM prepends them to the waiting queue), then by arrival."""
    s = ctx.snap
    preempted = rows[s.rotations[rows] > 0]
    fresh = rows[s.rotations[rows] == 0]
    yield from stream_desc(-s.t_arr, preempted, s.t_arr, s.req_id)
    yield from stream_desc(-s.t_arr, fresh, s.t_arr, s.req_id)


def _priority_candidates(ctx: Ctx, rows: np.ndarray) -> Iterator[np.ndarray]:
    s = ctx.snap
    yield from stream_desc(-s.priority.astype(np.float64), rows, s.t_arr, s.req_id)


def _priority_victims(ctx: Ctx, rows: np.ndarray) -> np.ndarray:
    s = ctx.snap
    return sort_rows(rows, s.priority, s.t_arr, s.req_id)[::-1]


def _sjf_candidates(ctx: Ctx, rows: np.ndarray) -> Iterator[np.ndarray]:
    s = ctx.snap
    yield from stream_desc(-s.pred_remaining, rows, s.t_arr, s.req_id)


def _sjf_victims(ctx: Ctx, rows: np.ndarray) -> np.ndarray:
    s = ctx.snap
    return sort_rows(rows, s.pred_remaining, s.t_arr, s.req_id)[::-1]


def _vlt_desc(ctx: Ctx, rows: np.ndarray) -> np.ndarray:
    s = ctx.snap
    return rows[rank_order(ctx.vlt[rows], s.t_arr[rows], s.req_id[rows])]


def _vlt_asc(ctx: Ctx, rows: np.ndarray) -> np.ndarray:
    return _vlt_desc(ctx, rows)[::-1]


def _vlt_candidates(ctx: Ctx, rows: np.ndarray) -> Iterator[np.ndarray]:
    s = ctx.snap
    yield from stream_desc(ctx.vlt, rows, s.t_arr, s.req_id)  # rank_order, partially


def _vlt_feasible_first(ctx: Ctx, rows: np.ndarray) -> Iterator[np.ndarray]:
    """VLT order, but requests that can still meet their TTFT SLO before those that cannot (a sort by
    (hopeless, VLT desc, arrival, id))."""
    if ctx.hopeless is None:
        yield from _vlt_candidates(ctx, rows)
        return
    late = ctx.hopeless[rows]
    yield from _vlt_candidates(ctx, rows[~late])
    yield from _vlt_candidates(ctx, rows[late])


_RUNNING = int(Phase.RUNNING)  # a plain int: comparing an array with an IntEnum member is slower


def hopeless_mask(snap: Snapshot, tenants: TenantTable, now: float) -> np.ndarray:
    """Waiting requests with no output token yet whose TTFT SLO has already passed."""
    return (snap.outputs == 0) & (snap.phase != _RUNNING) & (now - snap.t_arr > tenants.ttft_slo[snap.tenant])


# ---- specs -------------------------------------------------------------------------------------
FCFS = PolicySpec("fcfs", _admission_order, _newest_first, _fcfs_candidates)
VLLM_OFFLOAD = PolicySpec(
    "vllm-offload", _admission_order, _newest_first, _fcfs_candidates, eager_sync=True
)
PRIORITY = PolicySpec("priority", _admission_order, _priority_victims, _priority_candidates)
SARATHI = PolicySpec(
    "sarathi",
    _admission_order,
    _newest_first,
    _fcfs_candidates,
    decodes_first=True,
    token_cap=lambda p: p.sarathi_token_budget,
)
SJF = PolicySpec("sjf", _admission_order, _sjf_victims, _sjf_candidates)
LVF_PAPER = PolicySpec(
    "lvf-paper",
    _vlt_desc,
    _vlt_asc,
    _vlt_candidates,
    decodes_first=True,
    discretionary=True,
    save_tail=True,
    eager_sync=True,
    admit_after_preempt=True,
    uses_vlt=True,
)
LVF = replace(LVF_PAPER, name="lvf", candidate_order=_vlt_feasible_first, slo_guards=True)
# What LVF does when everything fits: FCFS decisions, but keep copying full blocks early so that the
# next burst finds them synced.
_LVF_FALLBACK = PolicySpec(
    "lvf", _admission_order, _newest_first, _fcfs_candidates, eager_sync=True
)
_LVF_PAPER_FALLBACK = replace(_LVF_FALLBACK, name="lvf-paper")


@dataclass(frozen=True)
class Policy:
    """A named policy. ``plan`` validates its input unless ``validate=False``."""

    spec: PolicySpec
    fallback: PolicySpec | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def plan(
        self,
        snap: Snapshot,
        cap: Capacity,
        params: Params,
        tenants: TenantTable,
        now: float,
        *,
        validate: bool = True,
    ) -> Plan:
        if validate:
            validate_snapshot(snap, cap, tenants)
        ctx = Ctx(snap, cap, params, tenants, now)
        if self.fallback is not None and fits_in_hbm(snap, cap):
            plan = build_plan(ctx, self.fallback)
            plan.fcfs_fallback = True
        else:
            if self.spec.uses_vlt:
                ctx.vlt = compute_vlt(snap, tenants, params, now, banked_tbt=self._credit(params))
            if self.spec.slo_guards and params.hopeless_last:
                ctx.hopeless = hopeless_mask(snap, tenants, now)
            plan = build_plan(ctx, self.spec)
        if self.spec.uses_vlt:
            vlt = ctx.vlt if ctx.vlt is not None else compute_vlt(snap, tenants, params, now,
                                                                  banked_tbt=self._credit(params))
            _attach_ranking(plan, snap, vlt)
        return plan

    def _credit(self, params: Params) -> bool:
        """Whether a parked request's lag counts from its mean-TBT deadline: ``lvf`` with ``tbt_credit``."""
        return self.spec.slo_guards and bool(params.tbt_credit)

    @property
    def gated(self) -> bool:
        """Whether an engine may hold the batch unplanned between plans (``Params.replan_steps``,
        :mod:`superinfer.core.gate`): RotaSched v2 only; ``lvf-paper`` and the stock policies plan every step."""
        return self.spec.slo_guards

    def hold(self, snap: Snapshot, cap: Capacity, params: Params, tenants: TenantTable, now: float) -> Plan:
        """The plan of a step that holds (:func:`~superinfer.core.gate.batch_holds` must be true): every running
        request scheduled with its growth, nothing else; no ranking (the last plan's stands)."""
        return build_plan(Ctx(snap, cap, params, tenants, now), self.spec, hold=True)

    def only_serves_batch(self, snap: Snapshot, cap: Capacity, params: Params, tenants: TenantTable,
                          now: float) -> bool:
        """:func:`~superinfer.core.planner.only_serves_batch` for this policy (no validation)."""
        return only_serves_batch(Ctx(snap, cap, params, tenants, now), self.spec, self.fallback is not None)


def _attach_ranking(plan: Plan, snap: Snapshot, vlt: np.ndarray) -> None:
    """Keep every request's VLT for observability; ``Plan.ranking()`` sorts it when asked."""
    plan.vlt_ids = snap.req_id
    plan.vlt_values = vlt
    plan.vlt_t_arr = snap.t_arr


POLICIES: dict[str, Policy] = {
    "fcfs": Policy(FCFS),
    "vllm-offload": Policy(VLLM_OFFLOAD),
    "priority": Policy(PRIORITY),
    "sarathi": Policy(SARATHI),
    "sjf": Policy(SJF),
    "lvf": Policy(LVF, fallback=_LVF_FALLBACK),
    "lvf-paper": Policy(LVF_PAPER, fallback=_LVF_PAPER_FALLBACK),
}
ALIASES = {"vllm": "fcfs"}
#: Names an engine accepts: the core's policies plus variants of the engine around them (``vllm`` is
#: ``fcfs``; ``lvf-nooverlap`` is ``lvf`` on a transfer engine without overlap or duplex; ``lvf-hbm`` is
#: ``lvf`` with no host tier).
ENGINE_POLICIES = ("vllm", "fcfs", "vllm-offload", "priority", "sarathi", "sjf", "lvf", "lvf-paper",
                   "lvf-nooverlap", "lvf-hbm")
#: Engine policies that run their core policy with no host tier (no DRAM pool, no transfer budget).
HBM_ONLY_POLICIES = ("lvf-hbm",)
#: Core policies that rotate KV through DRAM under a transfer budget (RotaSched and its variants).
ROTATING_POLICIES = ("lvf", "lvf-paper")
ENGINE_ALIASES = {**ALIASES, "lvf-nooverlap": "lvf", "lvf-hbm": "lvf"}


def core_policy_name(engine_policy: str) -> str:
    """The core policy behind an engine policy name (``vllm`` -> ``fcfs``)."""
    if engine_policy not in ENGINE_POLICIES:
        raise ValueError(f"policy: unknown policy {engine_policy!r}; valid: {', '.join(ENGINE_POLICIES)}")
    return ENGINE_ALIASES.get(engine_policy, engine_policy)


def budgeted(engine_policy: str) -> bool:
    """Does the engine policy move KV between HBM and host memory under a per-iteration budget
    ``b_xfer`` (a rotating policy with a host tier)?"""
    return core_policy_name(engine_policy) in ROTATING_POLICIES and engine_policy not in HBM_ONLY_POLICIES


def get_policy(name: str) -> Policy:
    """Look up a policy by name (``vllm`` is an alias of ``fcfs``)."""
    key = ALIASES.get(name, name)
    try:
        return POLICIES[key]
    except KeyError:
        valid = sorted(set(POLICIES) | set(ALIASES))
        raise ValueError(f"policy: unknown policy {name!r}; valid: {', '.join(valid)}") from None


def ranking(snap: Snapshot, tenants: TenantTable, params: Params, now: float) -> tuple[np.ndarray, np.ndarray]:
    """(request ids, VLT) largest VLT first: what ``lvf`` (RotaSched v2) serves first, so with
    ``params.tbt_credit`` a parked request's banked TBT slack is credited as its plans credit it."""
    vlt = compute_vlt(snap, tenants, params, now, banked_tbt=bool(params.tbt_credit))
    order = rank_order(vlt, snap.t_arr, snap.req_id)
    return snap.req_id[order], vlt[order]
