"""The digital twin: a discrete-event serving engine in virtual time that runs the real scheduler core.

One iteration, read top to bottom (:meth:`Simulator.step`):

1. requests whose arrival time has passed join the queue;
2. the policy plans over the core's :class:`~superinfer.core.EngineState` snapshot (the same call the
   vLLM plugin makes);
3. blocks change hands (``state.apply``);
4. the cost model prices the iteration: compute for the scheduled prefill chunks and decodes, and the
   copies: swap-ins and eager syncs overlap with compute (``max``) when the transfer engine overlaps,
   else they add; victims' unsynced tails are copied *before* compute, because compute may reuse their
   blocks (DuplexKV rule 2);
5. copies complete, tokens are computed, outputs sampled, token timestamps recorded.

Time only moves forward; when nothing is live it jumps to the next arrival. Arrivals stop at the
workload's end; the run then drains until every request has finished or ``drain_s`` has passed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from superinfer.core import EngineState, Params, TenantTable, get_policy
from superinfer.sim.costmodel import CostModel
from superinfer.sim.workload import Workload

# Names the benchmarks accept: the core's policies plus variants that change the transfer engine.
SIM_POLICIES = ("vllm", "fcfs", "vllm-offload", "priority", "sarathi", "sjf", "lvf", "lvf-nooverlap")
UNBOUNDED = 1 << 40


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


@dataclass
class Trace:
    """What the run recorded, for :mod:`superinfer.sim.metrics`."""

    t_arr: np.ndarray
    t_first: np.ndarray
    t_end: np.ndarray  # NaN while unfinished
    outputs: np.ndarray  # output tokens produced (so far)
    last_token: np.ndarray
    rotations: np.ndarray
    tenant: np.ndarray
    gaps: np.ndarray  # every inter-token gap of every request (seconds)
    gap_tenant: np.ndarray
    rejected: int = 0
    window_tokens: int = 0  # output tokens produced before the end of the arrival window
    iterations: int = 0
    sim_s: float = 0.0
    wall_s: float = 0.0
    counters: dict = field(default_factory=dict)
    max_swap_in_blocks_per_iter: int = 0
    max_swap_out_blocks_per_iter: int = 0
    max_hbm_blocks_used: int = 0
    hbm_blocks: int = 0
    dram_blocks: int = 0
    b_xfer_blocks: int = 0
    block_bytes: int = 0


class Simulator:
    """Replays one workload through one policy on one cost model."""

    def __init__(self, workload: Workload, cm: CostModel, cfg: SimConfig) -> None:
        self.w, self.cm, self.cfg = workload, cm, cfg
        core_name = {"vllm": "fcfs", "lvf-nooverlap": "lvf"}.get(cfg.policy, cfg.policy)
        self.policy = get_policy(core_name)
        self.lossless = core_name == "lvf"
        self.hbm_blocks = (cm.hbm_kv_blocks(cfg.max_num_batched_tokens) if cfg.hbm_blocks is None
                           else int(cfg.hbm_blocks))
        uses_dram = core_name in ("lvf", "vllm-offload")
        self.dram_blocks = (cm.dram_blocks() if cfg.dram_blocks is None else cfg.dram_blocks) if uses_dram else 0
        if core_name == "lvf":
            b = cfg.b_xfer if cfg.b_xfer is not None else cm.default_b_xfer(reference_iteration_s(cm, cfg.max_num_seqs))
        elif core_name == "vllm-offload":
            b = UNBOUNDED  # vLLM's offloading connector has no transfer budget
        else:
            b = 0
        self.b_xfer = int(b)
        self.state = EngineState(self.hbm_blocks, self.dram_blocks, cm.block_size, grow=max(1024, len(workload)))
        n = len(workload)
        self.t_first = np.full(n, np.nan)
        self.t_end = np.full(n, np.nan)
        self.outputs = np.zeros(n, np.int64)
        self.last_token = np.full(n, np.nan)
        self.rotations = np.zeros(n, np.int64)
        self._gaps: list[np.ndarray] = []
        self._gap_tenant: list[np.ndarray] = []
        self.max_h2d = self.max_d2h = self.max_used = 0
        rng = np.random.default_rng(cfg.seed + 7919)
        noise = rng.lognormal(0.0, cfg.sjf_noise, n) if cfg.sjf_noise > 0 else np.ones(n)
        self.pred = workload.output_tokens * noise
        self.tenant_index = np.array(
            [cfg.tenants.index.get(name, 0) for name in workload.tenant_names], np.int64
        )[workload.tenant_ids]
        self.priority = np.array([cfg.tenants.tenants[i].priority for i in self.tenant_index], np.int64) if n else np.zeros(0, np.int64)

    # ---- one iteration --------------------------------------------------------------------------
    def _arrive(self, now: float) -> None:
        w, st = self.w, self.state
        while self._next < len(w) and w.arrival_s[self._next] <= now:
            i = self._next
            st.add(i, float(w.arrival_s[i]), int(w.prompt_tokens[i]), int(w.output_tokens[i]),
                   tenant=int(self.tenant_index[i]), priority=int(self.priority[i]),
                   pred_remaining=float(self.pred[i]))
            self._next += 1

    def step(self, now: float) -> float:
        """Run one iteration starting at ``now``; returns its end time."""
        st, cm, cfg = self.state, self.cm, self.cfg
        cap = st.capacity(self.b_xfer, cfg.max_num_batched_tokens, cfg.max_num_seqs)
        plan = self.policy.plan(st.snapshot(), cap, cfg.params, cfg.tenants, now, validate=False)
        rows = st.rows_of(plan.sched_ids)  # shared by apply, the cost model and advance
        moves = st.apply(plan, now, lossless_victims=self.lossless, rows=rows)
        tokens = plan.sched_tokens
        computed = st.num_computed[rows]
        decode = (tokens == 1) & (st.outputs[rows] > 0)
        pre_k, pre_c = tokens[~decode], computed[~decode]
        compute_s = cm.iteration_s(
            int(pre_k.sum()),
            float((pre_k * pre_c + pre_k * (pre_k + 1) // 2).sum()),
            int(decode.sum()),
            int(computed[decode].sum()),
            int(pre_c.sum()),
        )
        tail = len(moves.swap_out)
        background = cm.transfer_s(moves.h2d_blocks, len(moves.sync))
        step = cm.transfer_s(0, tail) + cm.step_s(compute_s, background)
        if step <= 0.0:  # nothing could run (everything waits on the link): let time pass
            step = cm.overhead_s if cm.overhead_s > 0 else 1e-3
        t_end = now + step
        self.max_h2d = max(self.max_h2d, moves.h2d_blocks)
        self.max_d2h = max(self.max_d2h, moves.d2h_blocks)
        self.max_used = max(self.max_used, st.ledger.hbm.used)
        st.complete_transfers(t_end)
        # Token timestamps: rows that finish their pending tokens sample an output at t_end.
        samples = rows[st.num_computed[rows] + tokens == st.num_tokens[rows]]
        had = samples[st.outputs[samples] > 0]
        if had.shape[0]:
            self._gaps.append(t_end - st.t_last[had])
            self._gap_tenant.append(st.tenant[had].copy())
        ids = st.req_id[samples]
        for f in st.advance(plan, t_end, rows):
            self.t_end[f.req_id] = t_end
            self.rotations[f.req_id] = f.rotations
        self.outputs[ids] += 1
        self.last_token[ids] = t_end
        first = ids[np.isnan(self.t_first[ids])]
        self.t_first[first] = t_end
        return t_end

    # ---- the run --------------------------------------------------------------------------------
    def run(self) -> Trace:
        w, st = self.w, self.state
        wall0 = time.perf_counter()
        self._next = 0
        now = 0.0
        end_of_arrivals = float(w.arrival_s[-1]) if len(w) else 0.0
        deadline = max(end_of_arrivals, w.duration_s) + self.cfg.drain_s
        iterations = 0
        window_end = max(float(w.duration_s), end_of_arrivals)
        window_tokens = -1
        while True:
            if window_tokens < 0 and now >= window_end:
                window_tokens = int(self.outputs.sum())
            self._arrive(now)
            if len(st) == 0:
                if self._next >= len(w):
                    break
                now = float(w.arrival_s[self._next])
                continue
            if now >= deadline:
                break
            now = self.step(now)
            iterations += 1
        for rid, r in list(st._row.items()):  # still live at the deadline
            self.rotations[rid] = int(st.rotations[r])
        st.check()
        wall = time.perf_counter() - wall0
        gaps = np.concatenate(self._gaps) if self._gaps else np.zeros(0)
        gap_tenant = np.concatenate(self._gap_tenant) if self._gap_tenant else np.zeros(0, np.int64)
        return Trace(
            t_arr=w.arrival_s.copy(),
            t_first=self.t_first,
            t_end=self.t_end,
            outputs=self.outputs,
            last_token=self.last_token,
            rotations=self.rotations,
            tenant=self.tenant_index,
            gaps=gaps,
            gap_tenant=gap_tenant,
            rejected=st.counters.rejected,
            window_tokens=window_tokens if window_tokens >= 0 else int(self.outputs.sum()),
            iterations=iterations,
            sim_s=now,
            wall_s=wall,
            counters=vars(st.counters).copy(),
            max_swap_in_blocks_per_iter=self.max_h2d,
            max_swap_out_blocks_per_iter=self.max_d2h,
            max_hbm_blocks_used=self.max_used,
            hbm_blocks=self.hbm_blocks,
            dram_blocks=self.dram_blocks,
            b_xfer_blocks=self.b_xfer if self.b_xfer < UNBOUNDED else -1,
            block_bytes=self.cm.block_bytes,
        )
