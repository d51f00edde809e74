"""Input checks for the planner. Every failure is a ``ValueError`` whose message starts with the field.

Vectorised: a clean 10,000-row snapshot costs about 100 microseconds to check. The checks run in a
fixed order and the first that fails names its field and the first failing row; later checks may rely
on earlier ones (counts are >= 0 once the count columns pass).
"""

from __future__ import annotations

import numpy as np

from superinfer.core.types import COUNT_COLUMNS, Capacity, Phase, Snapshot, TenantTable, blocks_for

_NON_NEGATIVE = COUNT_COLUMNS
_WAITING, _RUNNING = int(Phase.WAITING), int(Phase.RUNNING)  # plain ints: IntEnum comparisons are slow


def _fail(name: str, snap: Snapshot, mask: np.ndarray, what: str) -> None:
    _fail_row(name, snap, int(np.flatnonzero(mask)[0]), what)


def _fail_row(name: str, snap: Snapshot, row: int, what: str) -> None:
    raise ValueError(
        f"{name}: {what} (request {int(snap.req_id[row])}, row {row}, value {getattr(snap, name)[row]!r})"
    )


def validate_snapshot(snap: Snapshot, cap: Capacity, tenants: TenantTable) -> None:
    """Raise ``ValueError`` naming the field if the snapshot is not a state the planner accepts."""
    if len(snap) == 0:
        return
    # Reductions first (no temporaries); the masks are built only to name the failing row.
    for name in ("t_arr", "t_last", "t_run", "pred_remaining"):
        col = getattr(snap, name)
        if not np.isfinite(col.sum()):
            _fail(name, snap, ~np.isfinite(col), "must be a finite number (NaN or inf given)")
    for name in _NON_NEGATIVE:
        col = getattr(snap, name)
        if col.min() < 0:
            _fail(name, snap, col < 0, "must be >= 0")
    if int(snap.phase.min()) < _WAITING or int(snap.phase.max()) > _RUNNING:
        bad = (snap.phase < _WAITING) | (snap.phase > _RUNNING)
        _fail("phase", snap, bad, "unknown phase; expected 0 (waiting), 1 (rotary) or 2 (running)")
    if snap.tenant.min() < 0 or snap.tenant.max() >= len(tenants):
        bad = (snap.tenant < 0) | (snap.tenant >= len(tenants))
        _fail("tenant", snap, bad, f"tenant index out of range [0, {len(tenants)})")
    ids = snap.req_id
    if not (ids.shape[0] < 2 or bool(np.all(ids[1:] > ids[:-1]))) and np.unique(ids).shape[0] != len(snap):
        ids, counts = np.unique(snap.req_id, return_counts=True)
        raise ValueError(f"req_id: duplicate request id {int(ids[counts > 1][0])}")
    if snap.num_tokens.min() < 1:
        _fail("num_tokens", snap, snap.num_tokens < 1, "every live request has at least one token")
    bad = snap.num_computed > snap.num_tokens
    if bad.any():
        _fail("num_computed", snap, bad, "exceeds num_tokens")
    if blocks_for(int(snap.num_tokens.max()), cap.block_size) > cap.hbm_blocks:
        need = blocks_for(snap.num_tokens, cap.block_size)
        row = int(np.flatnonzero(need > cap.hbm_blocks)[0])
        raise ValueError(
            f"num_tokens: request {int(snap.req_id[row])} needs {int(need[row])} blocks, more than "
            f"hbm_blocks {cap.hbm_blocks}; it can never run and must be rejected at admission"
        )
    bad = snap.synced + snap.syncing > np.minimum(snap.blocks_hbm, snap.blocks_dram)
    if bad.any():
        _fail("synced", snap, bad, "synced + syncing exceeds min(blocks_hbm, blocks_dram)")
    running = snap.phase == _RUNNING
    rows = np.flatnonzero(running)  # few (at most the batch): checked on their own
    bad = (snap.blocks_hbm[rows] < blocks_for(snap.num_computed[rows], cap.block_size)) & (snap.h2d_pending[rows] == 0)
    if bad.any():
        row = int(rows[bad][0])
        _fail_row("blocks_hbm", snap, row, "a running request must hold the blocks of its computed tokens")
    bad = snap.h2d_pending > snap.blocks_hbm  # so h2d_pending > 0: blocks_hbm >= 0
    if bad.any():
        _fail("h2d_pending", snap, bad, "exceeds the blocks reserved in HBM for the swap-in")
    resident = (snap.blocks_hbm > 0) | running
    bad = (snap.num_computed > 0) & ~resident & (snap.blocks_dram * cap.block_size < snap.num_computed)
    if bad.any():
        _fail("blocks_dram", snap, bad, "a parked request's computed tokens must be held in DRAM")
    used = int(snap.blocks_hbm.sum())
    if used + cap.free_blocks > cap.hbm_blocks:
        raise ValueError(
            f"free_blocks: {cap.free_blocks} free plus {used} held by requests exceeds hbm_blocks "
            f"{cap.hbm_blocks}"
        )
