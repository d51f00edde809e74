"""Plain data the scheduler core takes and returns. No torch, no vLLM.

A :class:`Snapshot` is a struct of arrays, one row per live request, built by an engine adapter (the
simulator or the vLLM plugin). A :class:`Plan` is what a policy returns for one iteration.

Block vocabulary (design §3–§4):

* ``blocks_hbm``: device blocks the request holds now (its KV, plus those reserved for a swap-in in progress).
* ``blocks_dram``: host blocks holding copies of its KV.
* ``synced``: how many of its first device blocks have a *completed* host copy. Eager sync proceeds in
  block order, so the synced blocks are always a prefix; ``synced <= min(blocks_hbm, blocks_dram)``.
* ``syncing``: device blocks whose host copy is issued but not finished (the next after ``synced``).
* ``h2d_pending``: blocks of a swap-in that still have to be issued host-to-device. Such a request holds
  ``blocks_hbm`` already; it is neither schedulable nor a victim until the copy completes.
* ``busy``: a transfer of this request is in flight; the planner leaves it alone this iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from enum import IntEnum

import numpy as np

from superinfer.core.knobs import KNOB, KNOBS, KnobError


class Phase(IntEnum):
    """Phase of a live request, as VLT sees it (design §3.1)."""

    WAITING = 0  # no output token yet (new, or preempted before its first token)
    ROTARY = 1  # has output tokens; KV not (fully) in HBM
    RUNNING = 2  # KV in HBM, in the batch


class VictimMode(IntEnum):
    """What happens to a preempted request's KV."""

    SWAP = 0  # everything it had is kept: synced blocks stay in DRAM, the unsynced tail is copied out
    RECOMPUTE = 1  # some or all of its KV is dropped and will be recomputed


#: ``residency`` of a request that was never swapped in: no minimum-residency guard applies to it.
FRESH_RESIDENCY = 1 << 30


def rank_order(vlt: np.ndarray, t_arr: np.ndarray, req_id: np.ndarray) -> np.ndarray:
    """The one ranking key of the project: order by VLT descending, ties to the earlier arrival, then
    the smaller id. Returns the permutation (``np.lexsort``), so callers index any parallel array."""
    return np.lexsort((req_id, t_arr, -vlt))


def blocks_for(tokens: np.ndarray | int, block_size: int) -> np.ndarray | int:
    """Blocks needed to hold ``tokens`` tokens of KV."""
    return (tokens + block_size - 1) // block_size


@dataclass(frozen=True)
class Tenant:
    """A tenant's SLOs and weight. SLOs in seconds; ``weight >= 1`` scales lag (design §3.1)."""

    name: str = "default"
    ttft_slo: float = 5.0
    tbt_slo: float = 0.1
    weight: float = 1.0
    priority: int = 0
    # first-token deadline: a request that has waited this long without holding KV is shed (inf: never)
    max_queue_s: float = math.inf
    # most requests of this tenant in flight at the daemon's door at once (0: no limit); one more gets a 429
    max_inflight: int = 0

    def __post_init__(self) -> None:
        for name in ("ttft_slo", "tbt_slo"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"tenant {self.name!r}: {name} must be a finite number > 0, got {value!r}")
        if math.isnan(self.max_queue_s) or self.max_queue_s <= 0:
            raise ValueError(f"tenant {self.name!r}: max_queue_s must be > 0 (inf: no deadline), "
                             f"got {self.max_queue_s!r}")
        if self.max_inflight < 0:
            raise ValueError(f"tenant {self.name!r}: max_inflight must be >= 0 (0: no limit), got {self.max_inflight!r}")
        if not math.isfinite(self.weight) or self.weight < 1:
            raise ValueError(f"tenant {self.name!r}: weight must be >= 1, got {self.weight!r}")


class TenantTable:
    """Tenants indexed by position; the snapshot's ``tenant`` column holds these indices."""

    def __init__(self, tenants: list[Tenant] | None = None) -> None:
        tenants = list(tenants) if tenants else [Tenant()]
        names = [t.name for t in tenants]
        if len(set(names)) != len(names):
            raise ValueError(f"tenants: duplicate tenant names in {names}")
        self.tenants = tenants
        self.index = {t.name: i for i, t in enumerate(tenants)}
        self.ttft_slo = np.array([t.ttft_slo for t in tenants], dtype=np.float64)
        self.tbt_slo = np.array([t.tbt_slo for t in tenants], dtype=np.float64)
        self.weight = np.array([t.weight for t in tenants], dtype=np.float64)
        self.max_queue_s = np.array([t.max_queue_s for t in tenants], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.tenants)

    def lookup(self, name: str) -> int:
        try:
            return self.index[name]
        except KeyError:
            raise ValueError(f"tenant: unknown tenant {name!r}; known: {sorted(self.index)}") from None


#: bounds of the live-tunable knobs (from :data:`~superinfer.core.knobs.KNOBS`, the one table of the knobs);
#: the daemon's PUT /v1/params and the tuner use the same table
PARAM_BOUNDS: dict[str, tuple[float, float]] = {k.name: k.bounds for k in KNOBS}


@dataclass(frozen=True)
class Params:
    """Scheduler knobs (design §3.1 and §3.2 guards). Paper main setting: α=3, δ_B=0, δ_F=0.5."""

    alpha: float = KNOB["alpha"].default
    delta_b: float = KNOB["delta_b"].default
    delta_f: float = KNOB["delta_f"].default
    min_residency: int = KNOB["min_residency"].default  # after a swap-in, before a discretionary victim
    max_rotations: int = KNOB["max_rotations"].default  # discretionary rotations per request, against starvation
    # A discretionary victim must be ahead of its SLO by this much: TBT slack S_B·(k−1) − (t − t_first)
    # after k tokens, or TTFT slack S_F − (t − t_arr) before the first (seconds).
    slack_gate_s: float = KNOB["slack_gate_s"].default
    # A candidate displaces a running request only if its VLT exceeds the victim's by more than this.
    rotation_margin_s: float = KNOB["rotation_margin_s"].default
    # Waiting requests already past their TTFT SLO rank after those that can still meet it, and never
    # displace a running request (Andes: a hopeless request gains nothing from service now).
    hopeless_last: int = KNOB["hopeless_last"].default
    # Iterations with running decodes are sized to this share of the tightest TBT SLO (prefill chunks cut
    # to fit, decodes never); needs the engine's step-time model (the twin's cost model).
    step_slo_share: float = KNOB["step_slo_share"].default
    # When the candidate LVF serves next cannot be made to fit (no victim allowed), later candidates that
    # fit in the free blocks are admitted while that candidate is still ahead of its SLO (EASY-style
    # backfilling: they never preempt, and the one skipped keeps its rank for the next iteration).
    backfill: int = KNOB["backfill"].default
    # At most one plan in this many steps while plans decide nothing (superinfer.core.gate); 1: every step.
    replan_steps: int = KNOB["replan_steps"].default
    # A parked request's lag counts from its mean-TBT deadline (banked TBT slack credited up to S_F), the
    # clock the slack gate parks it by; 0: from its last token (superinfer.core.vlt).
    tbt_credit: int = KNOB["tbt_credit"].default
    sarathi_token_budget: int = 512  # the stall-free budget of the `sarathi` baseline

    def __post_init__(self) -> None:
        for knob in KNOBS:  # the one validator of a knob's value (superinfer.core.knobs)
            try:
                knob.check(getattr(self, knob.name))
            except KnobError as exc:
                raise ValueError(f"params: {exc}") from None
        if self.sarathi_token_budget < 1:
            raise ValueError(f"params: sarathi_token_budget must be >= 1, got {self.sarathi_token_budget!r}")

    def replace(self, **changes: float) -> "Params":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = set(changes) - set(values)
        if unknown:
            raise ValueError(f"params: unknown parameter(s) {sorted(unknown)}")
        values.update(changes)
        return Params(**values)


#: each live knob's default (the table's, which is its ``Params`` field default), in ``PARAM_BOUNDS`` order
PARAM_DEFAULTS: dict[str, float | int] = {k.name: k.default for k in KNOBS}
#: the knobs that take integers (the table's ``kind``)
INTEGER_PARAMS: tuple[str, ...] = tuple(k.name for k in KNOBS if k.kind is int)


@dataclass(frozen=True)
class Capacity:
    """Per-iteration resources. ``b_xfer`` is blocks per iteration per direction (design §4).

    ``sync_loads``: the engine loads a parked request whole before the iteration's compute and the request
    computes in that same iteration (what vLLM with a synchronous KV-connector load is documented to do; the
    twin's ``sync_resume`` term. Measured on the CPU plugin it did not hold: docs/fidelity.md; off in the
    plugin and by default): a swap-in whose whole copy fits in what is left of ``b_xfer`` and that gets a
    token is scheduled in the iteration of its copy, with blocks for what it computes. Otherwise (and always
    by default: asynchronous loads) it computes in the iteration after its copy completes."""

    hbm_blocks: int
    free_blocks: int
    b_xfer: int
    token_budget: int
    max_num_seqs: int
    block_size: int
    dram_free_blocks: int = 0
    sync_loads: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.sync_loads, (bool, np.bool_)):
            raise ValueError(f"capacity: sync_loads must be a bool, got {self.sync_loads!r}")
        for f in fields(self):
            if f.name == "sync_loads":
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"capacity: {f.name} must be an integer, got {value!r}")
            if value < 0:
                raise ValueError(f"capacity: {f.name} must be >= 0, got {value}")
        for name in ("block_size", "token_budget", "max_num_seqs", "hbm_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"capacity: {name} must be >= 1, got {getattr(self, name)}")
        if self.free_blocks > self.hbm_blocks:
            raise ValueError(f"capacity: free_blocks {self.free_blocks} > hbm_blocks {self.hbm_blocks}")


# Column groups of a Snapshot; engine tables that keep more columns extend these.
COUNT_COLUMNS = (  # integers that can never be negative
    "num_tokens",
    "num_computed",
    "blocks_hbm",
    "blocks_dram",
    "synced",
    "syncing",
    "h2d_pending",
    "residency",
    "rotations",
    "outputs",
)
INT_COLUMNS = ("req_id", "tenant", "priority") + COUNT_COLUMNS
FLOAT_COLUMNS = ("t_arr", "t_last", "t_run", "pred_remaining", "t_first")  # t_first: NaN before the first token


@dataclass
class Snapshot:
    """One row per live request. Build with :meth:`from_columns`; validate with ``validate``.

    ``num_tokens`` is prompt plus output tokens so far (all need KV after this step);
    ``num_computed`` the tokens whose KV exists in HBM or DRAM. ``to_compute = num_tokens -
    num_computed`` is 1 for a decode step and more for a (re)prefill. ``t_*`` are seconds on the
    engine's clock; ``pred_remaining`` is the `sjf` baseline's predicted remaining output tokens;
    ``outputs`` the output tokens so far and ``t_first`` the time of the first (NaN before it).
    """

    req_id: np.ndarray
    phase: np.ndarray
    t_arr: np.ndarray
    t_last: np.ndarray
    t_run: np.ndarray
    tenant: np.ndarray
    num_tokens: np.ndarray
    num_computed: np.ndarray
    blocks_hbm: np.ndarray
    blocks_dram: np.ndarray
    synced: np.ndarray
    syncing: np.ndarray
    h2d_pending: np.ndarray
    residency: np.ndarray
    rotations: np.ndarray
    priority: np.ndarray
    pred_remaining: np.ndarray
    busy: np.ndarray
    outputs: np.ndarray
    t_first: np.ndarray

    def __len__(self) -> int:
        return int(self.req_id.shape[0])

    @classmethod
    def from_columns(cls, **columns: object) -> "Snapshot":
        """Build from array-likes. Missing optional columns get neutral defaults."""
        if "req_id" not in columns:
            raise ValueError("snapshot: req_id column is required")
        n = len(np.asarray(columns["req_id"]))
        defaults: dict[str, object] = {
            "tenant": 0,
            "blocks_dram": 0,
            "synced": 0,
            "syncing": 0,
            "h2d_pending": 0,
            "residency": FRESH_RESIDENCY,
            "rotations": 0,
            "priority": 0,
            "pred_remaining": 0.0,
            "busy": False,
            "outputs": 0,
            "t_first": np.nan,
        }
        unknown = set(columns) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"snapshot: unknown column(s) {sorted(unknown)}")
        out: dict[str, np.ndarray] = {}
        for f in fields(cls):
            if f.name in columns:
                raw = columns[f.name]
            elif f.name in defaults:
                raw = defaults[f.name]
            else:
                raise ValueError(f"snapshot: column {f.name} is required")
            if f.name in INT_COLUMNS:
                dtype = np.int64
            elif f.name in FLOAT_COLUMNS:
                dtype = np.float64
            elif f.name == "phase":
                dtype = np.int8
            else:
                dtype = np.bool_
            arr = np.asarray(raw)
            if arr.ndim == 0:
                arr = np.full(n, arr)
            if arr.shape != (n,):
                raise ValueError(f"snapshot: column {f.name} has shape {arr.shape}, expected ({n},)")
            if dtype is np.int64 and arr.dtype.kind == "f":
                if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
                    bad = int(np.flatnonzero(~np.isfinite(arr) | (arr != np.floor(arr)))[0])
                    raise ValueError(f"{f.name}: expected integers, got {arr[bad]!r} at row {bad}")
            out[f.name] = arr.astype(dtype, copy=False)
        return cls(**out)

    @classmethod
    def gather(cls, table: object, rows: np.ndarray, **columns: np.ndarray) -> "Snapshot":
        """Rows ``rows`` of an engine table whose attributes are full-length column arrays named as
        the snapshot's fields; ``columns`` gives (already gathered) values for fields it lacks or names
        differently. One fancy-index copy per column, no validation (the caller's table is trusted)."""
        out = {}
        for f in fields(cls):
            out[f.name] = columns[f.name] if f.name in columns else getattr(table, f.name)[rows]
        return cls(**out)

    def take(self, index: np.ndarray) -> "Snapshot":
        """Rows ``index`` of this snapshot (a copy)."""
        return Snapshot(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


@dataclass
class Plan:
    """A policy's decisions for one iteration. All id arrays hold request ids (``Snapshot.req_id``).

    * ``sched_ids/sched_tokens``: requests computing this iteration and how many tokens each.
    * ``alloc_ids/alloc_blocks``: new device blocks each request gets this iteration (growth,
      admission, or the whole reservation of a swap-in).
    * ``swap_ids/swap_blocks``: host-to-device blocks issued this iteration (new or continued swap-ins).
    * ``victim_ids/victim_d2h/victim_mode/victim_forced``: preempted requests, the unsynced blocks each
      copies out, whether any KV is dropped (recompute), whether memory forced it.
    * ``sync_ids/sync_blocks``: eager device-to-host copies of full blocks.
    * ``vlt_ids/vlt_values/vlt_t_arr``: every live request's VLT in snapshot row order (empty for
      policies that do not rank by VLT); :meth:`ranking` sorts them largest first on demand, so the
      planner's hot path never pays for a full sort.
    """

    policy: str
    fcfs_fallback: bool = False
    sched_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sched_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    alloc_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    alloc_blocks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    swap_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    swap_blocks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    victim_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    victim_d2h: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    victim_mode: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    victim_forced: np.ndarray = field(default_factory=lambda: np.zeros(0, np.bool_))
    sync_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sync_blocks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    vlt_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    vlt_values: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    vlt_t_arr: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))

    def ranking(self, top: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(request ids, VLT), largest VLT first; ties to the earlier arrival, then the smaller id."""
        order = rank_order(self.vlt_values, self.vlt_t_arr, self.vlt_ids)
        if top is not None:
            order = order[:top]
        return self.vlt_ids[order], self.vlt_values[order]

    @property
    def h2d_blocks(self) -> int:
        return int(self.swap_blocks.sum())

    @property
    def d2h_blocks(self) -> int:
        return int(self.victim_d2h.sum() + self.sync_blocks.sum())

    @property
    def num_scheduled_tokens(self) -> int:
        return int(self.sched_tokens.sum())

    def decisions(self) -> tuple:
        """The scheduling decisions (everything but eager syncs and ranking), for comparisons."""
        return (
            tuple(self.sched_ids.tolist()),
            tuple(self.sched_tokens.tolist()),
            tuple(self.alloc_ids.tolist()),
            tuple(self.alloc_blocks.tolist()),
            tuple(self.swap_ids.tolist()),
            tuple(self.swap_blocks.tolist()),
            tuple(self.victim_ids.tolist()),
            tuple(self.victim_d2h.tolist()),
            tuple(self.victim_mode.tolist()),
        )
