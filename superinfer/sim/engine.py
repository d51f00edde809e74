"""The digital twin: a discrete-event serving engine in virtual time that runs the real scheduler core.

One iteration, read top to bottom (:meth:`Simulator.step`):

1. requests whose arrival time has passed join the queue;
2. the policy plans over the core's :class:`~superinfer.core.EngineState` snapshot (the same call the
   vLLM plugin makes);
3. blocks change hands (``state.apply``);
4. the cost model prices the iteration (``CostModel.price_step``): compute for the scheduled prefill
   chunks and decodes, and the copies: swap-ins and eager syncs overlap with compute (``max``) when the
   transfer engine overlaps, else they add; victims' unsynced tails are copied *before* compute,
   because compute may reuse their blocks (DuplexKV rule 2);
5. copies complete, tokens are computed, outputs sampled (``state.advance``); the iteration comes back
   as one :class:`StepResult`.

Time only moves forward; when nothing is live it jumps to the next arrival. Arrivals stop at the
workload's end; the run then drains until every request has finished or ``drain_s`` has passed.
What a run records (the :class:`Trace`) is gathered by :class:`~superinfer.sim.collect.Collector`, the one
collector of every loop over the twin (this run, the fleet, the tuner's replay); cost models are built by
:func:`superinfer.sim.build.build_cost_model`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from superinfer.core import (
    ENGINE_POLICIES,
    HBM_ONLY_POLICIES,
    ROTATING_POLICIES,
    Capacity,
    EngineState,
    Moves,
    Params,
    Phase,
    Plan,
    PlanGate,
    Sampled,
    Snapshot,
    TenantTable,
    batch_holds,
    budgeted,
    batch_token_budget,
    core_policy_name,
    decided_nothing,
    get_policy,
    nothing_to_plan,
)
from superinfer.core.wait import WaitPredictor
from superinfer.sim.collect import UNBOUNDED, Collector, Trace
from superinfer.sim.costmodel import CostModel, StepPrice
from superinfer.sim.host import HostCosts
from superinfer.sim.workload import Workload

# Names the benchmarks accept: the core's policies plus variants that change the transfer engine.
SIM_POLICIES = ENGINE_POLICIES


@dataclass
class SimConfig:
    """Engine settings of one simulated run."""

    policy: str
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    b_xfer: int | None = None  # blocks per iteration per direction; None: design §4 from the cost model
    params: Params = field(default_factory=Params)
    tenants: TenantTable = field(default_factory=TenantTable)
    hbm_blocks: int | None = None  # None: what fits in the profile's HBM (cost model); else this many
    dram_blocks: int | None = None  # None: the whole DRAM of the hardware profile
    drain_s: float = 300.0
    sjf_noise: float = 0.0  # log-normal sigma of the sjf oracle's predictions (0 = exact oracle)
    seed: int = 0
    host: HostCosts = field(default_factory=HostCosts)  # engine-host terms (docs/fidelity.md)
    #: batch sizes in tokens the engine ran before, least recently run first (HostCosts.new_shape_s; a set where
    #: the order is unknown)
    shapes_run: tuple[int, ...] | frozenset[int] = ()
    sync_loads: bool = False  # a swap-in loads whole and computes in its own iteration (core Capacity.sync_loads)
    # also shed at arrival a request whose predicted first-token wait passes its deadline (core.wait)
    shed_at_admission: bool = False

    def __post_init__(self) -> None:
        if self.policy not in SIM_POLICIES:
            raise ValueError(f"policy: unknown policy {self.policy!r}; valid: {', '.join(SIM_POLICIES)}")
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.b_xfer is not None and self.b_xfer < 0:
            raise ValueError(f"b_xfer: must be >= 0, got {self.b_xfer}")
        for name in ("hbm_blocks", "dram_blocks"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
                raise ValueError(f"{name}: expected an integer or None, got {v!r}")
        if self.hbm_blocks is not None and self.hbm_blocks < 1:
            raise ValueError(f"hbm_blocks: must be >= 1, got {self.hbm_blocks}")
        if self.dram_blocks is not None and self.dram_blocks < 0:
            raise ValueError(f"dram_blocks: must be >= 0, got {self.dram_blocks}")
        if self.drain_s < 0 or self.sjf_noise < 0:
            raise ValueError("drain_s and sjf_noise must be >= 0")


def reference_iteration_s(cm: CostModel, max_num_seqs: int) -> float:
    """The iteration time ``B_xfer`` is sized for (design §4): a loaded step of ``min(max_num_seqs, 256)``
    decodes at 1,024 tokens of context plus one 512-token prefill chunk, priced by the cost model."""
    decodes = min(max_num_seqs, 256)
    return cm.iteration_s(512, 512 * 513 // 2, decodes, decodes * 1024)


def transfer_budget(cm: CostModel, cfg: SimConfig) -> tuple[bool, int]:
    """(does the policy move KV under a per-iteration budget, its ``b_xfer`` in blocks per iteration each
    way): a rotating policy with a host tier takes ``cfg.b_xfer``, else design §4's budget from the cost
    model; vLLM's offloading connector has no budget (unbounded); a policy with no host tier moves none."""
    if budgeted(cfg.policy):
        b = cfg.b_xfer if cfg.b_xfer is not None else cm.default_b_xfer(reference_iteration_s(cm, cfg.max_num_seqs))
        return True, int(b)
    return False, UNBOUNDED if core_policy_name(cfg.policy) == "vllm-offload" else 0


@dataclass
class StepResult:
    """One iteration of the twin, as the engine saw it (computed once, where the state changed).

    ``plan`` and the ``snapshot`` it was made from (row ``i`` of ``plan.vlt_values`` is row ``i`` of
    the snapshot); ``moves`` the block copies; ``price`` what the cost model charged; ``plan_s`` the
    planner's wall time; ``sampled`` who produced a token at ``t_end``, whose token was the first, the
    inter-token gaps and the requests that finished.
    """

    t_start: float
    t_end: float
    plan: Plan
    snapshot: Snapshot
    moves: Moves
    price: StepPrice
    plan_s: float
    sampled: Sampled


class Simulator:
    """Replays one workload through one policy on one cost model; :meth:`add` and :meth:`step` also
    serve an open-ended engine (the daemon's live twin) that feeds requests one by one."""

    def __init__(self, workload: Workload, cm: CostModel, cfg: SimConfig) -> None:
        self.w, self.cm, self.cfg = workload, cm, cfg
        core_name = core_policy_name(cfg.policy)
        self.policy = get_policy(core_name)
        self.lossless = core_name in ROTATING_POLICIES
        self.slo_budget = self.policy.spec.slo_guards  # RotaSched v2 sizes its iterations to the TBT SLO
        self.hbm_blocks = (cm.hbm_kv_blocks(cfg.max_num_batched_tokens) if cfg.hbm_blocks is None
                           else int(cfg.hbm_blocks))
        uses_dram = (core_name in ROTATING_POLICIES or core_name == "vllm-offload") and \
            cfg.policy not in HBM_ONLY_POLICIES
        self.dram_blocks = (cm.dram_blocks() if cfg.dram_blocks is None else cfg.dram_blocks) if uses_dram else 0
        #: the policy moves KV under a per-iteration budget ``b_xfer`` (which a tuner may lower)
        self.budgeted, b = transfer_budget(cm, cfg)
        self.b_xfer = int(b)
        self._deadlines = bool(np.isfinite(cfg.tenants.max_queue_s).any())
        self.predictor = WaitPredictor() if cfg.shed_at_admission and self._deadlines else None
        self._refused: list[int] = []  # shed at arrival since the run loop last looked
        self.n_refused = 0
        self.state = EngineState(self.hbm_blocks, self.dram_blocks, cm.block_size, grow=max(1024, len(workload)))
        self.max_h2d = self.max_d2h = self.max_used = 0
        self.gate = PlanGate()  # holds the batch unplanned between plans, as the plugin does
        self.held_steps = 0
        # batch sizes in tokens set up now, least recently run first (HostCosts.new_shape_s, shape_capacity)
        self._shapes: dict[int, None] = {}
        self._shape_capacity = int(cfg.host.shape_capacity)
        for size in cfg.shapes_run:
            self._run_shape(int(size))
        self._idle_s = 0.0  # how long the engine sat idle before the next iteration (HostCosts.wake_*)
        n = len(workload)
        rng = np.random.default_rng(cfg.seed + 7919)
        noise = rng.lognormal(0.0, cfg.sjf_noise, n) if cfg.sjf_noise > 0 else np.ones(n)
        self.pred = workload.output_tokens * noise
        self.tenant_index = np.array(
            [cfg.tenants.index.get(name, 0) for name in workload.tenant_names], np.int64
        )[workload.tenant_ids]
        self.priority = np.array([cfg.tenants.tenants[i].priority for i in self.tenant_index], np.int64) if n else np.zeros(0, np.int64)

    # ---- one iteration --------------------------------------------------------------------------
    def add(self, req_id: int, t_arr: float, prompt_tokens: int, output_tokens: int, *, tenant: int = 0,
            priority: int = 0, pred_remaining: float = 0.0, max_model_len: int | None = None) -> bool:
        """A request arrives; False (reason in ``state.rejections``) if it can never run."""
        return self.state.admit(req_id, t_arr, prompt_tokens, output_tokens, tenant=tenant, priority=priority,
                                pred_remaining=pred_remaining, max_model_len=max_model_len)

    def arrive(self, i: int) -> bool:
        """The workload's request ``i`` arrives: True if it entered the engine; False if it was refused at
        the door (``shed_at_admission``: its predicted wait passes its tenant's deadline; counted as shed and
        returned by the next :meth:`shed`, a 503 in the daemon) or can never run (:meth:`add`)."""
        if self.predictor is not None and self.predictor.refuse(float(self.cfg.tenants.max_queue_s[self.tenant_index[i]])):
            self._refused.append(i)
            self.n_refused += 1
            self.state.counters.arrived += 1
            self.state.counters.shed += 1
            return False
        w = self.w
        return self.add(i, float(w.arrival_s[i]), int(w.prompt_tokens[i]), int(w.output_tokens[i]),
                        tenant=int(self.tenant_index[i]), priority=int(self.priority[i]),
                        pred_remaining=float(self.pred[i]))

    def _arrive(self, now: float) -> int:
        """Every request arrived by ``now`` arrives (:meth:`arrive`); how many."""
        w, first = self.w, self._next
        while self._next < len(w) and w.arrival_s[self._next] <= now:
            self.arrive(self._next)
            self._next += 1
        return self._next - first

    def shed(self, now: float) -> list[int]:
        """Shed the requests still without a first token at their tenant's deadline (``max_queue_s``,
        applied to every policy alike, as a client's timeout would be), and those refused at arrival since the
        last call (``shed_at_admission``); their ids."""
        refused, self._refused = self._refused, []
        return refused + (self.state.shed_expired(now, self.cfg.tenants.max_queue_s) if self._deadlines else [])

    def observe_wait(self, res: StepResult) -> None:
        """Feed the admission predictor one iteration: who waits for a first token now, who got one."""
        if self.predictor is not None:
            rows = self.state.live_rows()
            self.predictor.observe(res.t_end, int(np.count_nonzero(self.state.outputs[rows] == 0)),
                                   int(res.sampled.first_ids.shape[0]))

    def token_budget(self, now: float) -> int:
        """``max_num_batched_tokens``, or for RotaSched v2 the SLO-aware budget: prefill cut so that an
        iteration with running decodes is priced within ``step_slo_share`` of what its decodes' TBT SLOs
        allow (:func:`~superinfer.core.budget.step_target_s`)."""
        cfg = self.cfg
        share = cfg.params.step_slo_share
        if not self.slo_budget or share <= 0:
            return cfg.max_num_batched_tokens
        st = self.state
        return batch_token_budget(st, st.live_rows(), self.cm.iteration_s, share, cfg.tenants.tbt_slo, now,
                                  cfg.max_num_batched_tokens)

    def step(self, now: float) -> StepResult:
        """Run one iteration starting at ``now``: plan, move blocks, price, complete copies, sample."""
        st, cm, cfg = self.state, self.cm, self.cfg
        cap = st.capacity(self.b_xfer, self.token_budget(now), cfg.max_num_seqs, cfg.sync_loads)
        snap = st.snapshot()
        t0 = time.perf_counter()
        plan, held = self._decide(snap, cap, now)
        plan_s = time.perf_counter() - t0
        rows = st.rows_of(plan.sched_ids)  # shared by apply, the cost model and advance
        swap_ins = st.counters.swap_ins
        moves = st.apply(plan, now, lossless_victims=self.lossless, rows=rows)
        tokens = plan.sched_tokens
        decode = (tokens == 1) & (st.outputs[rows] > 0)
        price = cm.price_step(tokens, st.num_computed[rows], decode, moves.h2d_blocks, len(moves.swap_out),
                              len(moves.sync), parks_wait=self.lossless)
        wall = cfg.host.wall_s(price, plan.victim_d2h, plan.swap_blocks, len(moves.sync))
        t_end = now + wall + self._host_s(snap, cap, tokens, now, st.counters.swap_ins - swap_ins, held)
        self.max_h2d = max(self.max_h2d, moves.h2d_blocks)
        self.max_d2h = max(self.max_d2h, moves.d2h_blocks)
        self.max_used = max(self.max_used, st.ledger.hbm.used)
        st.complete_transfers(t_end)
        sampled = st.advance(plan, t_end, rows)
        return StepResult(now, t_end, plan, snap, moves, price, plan_s, sampled)

    def _decide(self, snap: Snapshot, cap: Capacity, now: float) -> tuple[Plan, bool]:
        """This step's plan, and whether it held the batch unplanned (:mod:`superinfer.core.gate`, as the
        plugin decides it)."""
        cfg, pol, gate, version = self.cfg, self.policy, self.gate, self.state.version
        if pol.gated and gate.may_hold(version, cfg.params.replan_steps) and \
                batch_holds(snap, np.arange(len(snap)), cap.free_blocks, cap.token_budget, cap.block_size):
            gate.held()
            self.held_steps += 1
            return pol.hold(snap, cap, cfg.params, cfg.tenants, now), True
        plan = pol.plan(snap, cap, cfg.params, cfg.tenants, now, validate=False)
        if pol.gated:
            gate.planned(decided_nothing(plan, int(np.count_nonzero(snap.phase == Phase.RUNNING))), version)
        return plan, False

    def _host_s(self, snap: Snapshot, cap: Capacity, sched_tokens: np.ndarray, now: float, resumes: int,
                held: bool = False) -> float:
        """The iteration's host terms (:class:`HostCosts`); called once the plan's blocks have moved, with the
        number of swap-ins it started; ``held``: the step served its batch without planning."""
        host, cfg, st = self.cfg.host, self.cfg, self.state
        extra = host.step_s + host.output_s + host.output_per_seq_s * sched_tokens.shape[0] + host.resume_s * resumes
        if host.waiting_s > 0 and np.any(st.phase[st.live_rows()] != Phase.RUNNING):
            extra += host.waiting_s  # requests still wait after this step's admissions
        if self._idle_s > 0:
            extra += host.wake_s(self._idle_s)
            self._idle_s = 0.0
        tokens = int(sched_tokens.sum())
        if (host.plan_s > 0 or host.plan_per_live_s > 0) and not held and not nothing_to_plan(snap, cap) \
                and not self.policy.only_serves_batch(snap, cap, cfg.params, cfg.tenants, now):
            extra += host.plan_s + host.plan_per_live_s * len(snap)
        if host.new_shape_s > 0 and tokens and not self._run_shape(tokens):
            extra += host.new_shape_s
        return extra

    def _run_shape(self, size: int) -> bool:
        """Record a step of ``size`` tokens; whether that size was set up (run before and, with a
        ``shape_capacity``, among that many sizes run last; the least recently run is evicted)."""
        shapes = self._shapes
        warm = size in shapes
        if warm and self._shape_capacity:
            del shapes[size]  # most recently run last
        if not warm or self._shape_capacity:
            shapes[size] = None
        if self._shape_capacity and len(shapes) > self._shape_capacity:
            del shapes[next(iter(shapes))]
        return warm

    # ---- the run --------------------------------------------------------------------------------
    def run(self) -> Trace:
        """Replay the workload: arrivals join (or are refused), overdue requests are shed, one :meth:`step`
        per iteration, a jump to the next arrival when idle, the drain until ``drain_s`` after the window."""
        w, st = self.w, self.state
        n = len(w)
        wall0 = time.perf_counter()
        self._next = 0
        now = 0.0
        col = Collector(w, self.cfg.drain_s, sheds=True)
        while True:
            in_window = now < col.window_end  # this iteration's tokens count towards window_tokens
            arrived = self._arrive(now)
            if arrived and self.cfg.host.arrival_s > 0:
                now += arrived * self.cfg.host.arrival_s  # the engine loop processes them before the step
            col.shed(self.shed(now), now)
            if len(st) == 0:
                if self._next >= n:
                    break
                self._idle_s += max(0.0, float(w.arrival_s[self._next]) - now)
                now = float(w.arrival_s[self._next])
                continue
            if now >= col.deadline:
                break
            res = self.step(now)
            self.observe_wait(res)
            now = res.t_end
            col.add(res.sampled, in_window)
        return col.trace([self], sim_s=now, wall_s=time.perf_counter() - wall0)
