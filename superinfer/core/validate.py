"""Input checks for the planner. Every failure is a ``ValueError`` whose message starts with the field.

Vectorised: a clean 10,000-row snapshot costs a few tens of microseconds to check.
"""

from __future__ import annotations

import numpy as np

from superinfer.core.types import Capacity, Phase, Snapshot, TenantTable, blocks_for

_NON_NEGATIVE = (
    "num_tokens",
    "num_computed",
    "blocks_hbm",
    "blocks_dram",
    "synced",
    "syncing",
    "h2d_pending",
    "residency",
    "rotations",
)


def _fail(name: str, snap: Snapshot, mask: np.ndarray, what: str) -> None:
    row = int(np.flatnonzero(mask)[0])
    raise ValueError(
        f"{name}: {what} (request {int(snap.req_id[row])}, row {row}, value {getattr(snap, name)[row]!r})"
    )


def validate_snapshot(snap: Snapshot, cap: Capacity, tenants: TenantTable) -> None:
    """Raise ``ValueError`` naming the field if the snapshot is not a state the planner accepts."""
    for name in ("t_arr", "t_last", "t_run", "pred_remaining"):
        col = getattr(snap, name)
        bad = ~np.isfinite(col)
        if bad.any():
            _fail(name, snap, bad, "must be a finite number (NaN or inf given)")
    for name in _NON_NEGATIVE:
        bad = getattr(snap, name) < 0
        if bad.any():
            _fail(name, snap, bad, "must be >= 0")
    bad = (snap.phase < Phase.WAITING) | (snap.phase > Phase.RUNNING)
    if bad.any():
        _fail("phase", snap, bad, "unknown phase; expected 0 (waiting), 1 (rotary) or 2 (running)")
    bad = (snap.tenant < 0) | (snap.tenant >= len(tenants))
    if bad.any():
        _fail("tenant", snap, bad, f"tenant index out of range [0, {len(tenants)})")
    if len(np.unique(snap.req_id)) != len(snap):
        ids, counts = np.unique(snap.req_id, return_counts=True)
        raise ValueError(f"req_id: duplicate request id {int(ids[counts > 1][0])}")
    bad = snap.num_tokens < 1
    if bad.any():
        _fail("num_tokens", snap, bad, "every live request has at least one token")
    bad = snap.num_computed > snap.num_tokens
    if bad.any():
        _fail("num_computed", snap, bad, "exceeds num_tokens")
    need = blocks_for(snap.num_tokens, cap.block_size)
    bad = need > cap.hbm_blocks
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"num_tokens: request {int(snap.req_id[row])} needs {int(need[row])} blocks, more than "
            f"hbm_blocks {cap.hbm_blocks}; it can never run and must be rejected at admission"
        )
    bad = snap.synced + snap.syncing > np.minimum(snap.blocks_hbm, snap.blocks_dram)
    if bad.any():
        _fail("synced", snap, bad, "synced + syncing exceeds min(blocks_hbm, blocks_dram)")
    computed_blocks = blocks_for(snap.num_computed, cap.block_size)
    running = snap.phase == Phase.RUNNING
    bad = running & (snap.blocks_hbm < computed_blocks) & (snap.h2d_pending == 0)
    if bad.any():
        _fail("blocks_hbm", snap, bad, "a running request must hold the blocks of its computed tokens")
    bad = (snap.h2d_pending > 0) & (snap.h2d_pending > snap.blocks_hbm)
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
