"""Builder helpers: small readable requests and states for scheduler tests.

``running(7, tokens=40)`` reads as "request 7 is running with 40 tokens of KV computed and one to
decode". Every builder fills the block columns consistently with ``BS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from superinfer.core.types import FRESH_RESIDENCY, Capacity, Params, Phase, Snapshot, Tenant, TenantTable, blocks_for

BS = 16


@dataclass
class R:
    req_id: int
    phase: Phase
    t_arr: float = 0.0
    t_last: float = 0.0
    t_run: float = 0.0
    tenant: int = 0
    num_tokens: int = 1
    num_computed: int = 0
    blocks_hbm: int = 0
    blocks_dram: int = 0
    synced: int = 0
    syncing: int = 0
    h2d_pending: int = 0
    residency: int = FRESH_RESIDENCY
    rotations: int = 0
    priority: int = 0
    pred_remaining: float = 0.0
    busy: bool = False
    outputs: int = 0
    t_first: float = float("nan")
    extra: dict = field(default_factory=dict)


def waiting(req_id: int, prompt: int = 32, t_arr: float = 0.0, **kw) -> R:
    """A new request: nothing computed, nothing held."""
    return R(req_id, Phase.WAITING, t_arr=t_arr, t_last=t_arr, t_run=t_arr, num_tokens=prompt, **kw)


def running(req_id: int, tokens: int = 32, t_arr: float = 0.0, t_run: float | None = None,
            synced: int = 0, prefill_left: int = 0, **kw) -> R:
    """In the batch with ``tokens`` computed; decodes next unless ``prefill_left`` > 0."""
    t_run = t_arr if t_run is None else t_run
    todo = prefill_left if prefill_left else 1
    return R(req_id, Phase.RUNNING, t_arr=t_arr, t_last=kw.pop("t_last", t_run), t_run=t_run,
             num_tokens=tokens + todo, num_computed=tokens, blocks_hbm=blocks_for(tokens, BS),
             blocks_dram=synced, synced=synced, **kw)


def rotary(req_id: int, tokens: int = 32, t_arr: float = 0.0, t_last: float = 0.0, **kw) -> R:
    """Preempted after its first token, all KV parked in DRAM."""
    return R(req_id, Phase.ROTARY, t_arr=t_arr, t_last=t_last, t_run=t_arr, num_tokens=tokens + 1,
             num_computed=tokens, blocks_dram=blocks_for(tokens, BS), rotations=kw.pop("rotations", 1), **kw)


def snap(*reqs: R) -> Snapshot:
    cols = {name: [getattr(r, name) for r in reqs] for name in R.__dataclass_fields__ if name != "extra"}
    cols["phase"] = [int(r.phase) for r in reqs]
    if not reqs:
        cols = {k: [] for k in cols}
    return Snapshot.from_columns(**cols)


def cap(free: int, hbm: int | None = None, *, b_xfer: int = 1000, tokens: int = 4096, seqs: int = 256,
        dram: int = 100_000, reqs: tuple[R, ...] = (), sync_loads: bool = False) -> Capacity:
    """Capacity with ``free`` free blocks; ``hbm`` defaults to free plus what ``reqs`` hold."""
    held = sum(r.blocks_hbm for r in reqs)
    return Capacity(hbm_blocks=hbm if hbm is not None else free + held, free_blocks=free, b_xfer=b_xfer,
                    token_budget=tokens, max_num_seqs=seqs, block_size=BS, dram_free_blocks=dram,
                    sync_loads=sync_loads)


def state(*reqs: R, free: int, **kw) -> tuple[Snapshot, Capacity]:
    return snap(*reqs), cap(free, reqs=reqs, **kw)


TENANTS = TenantTable([Tenant("default", 5.0, 0.1, 1.0)])
PARAMS = Params()
