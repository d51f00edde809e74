"""Virtual Lag Time and the Largest-VLT-First ranking (design §3.1).

For request r at time t with its tenant's TTFT SLO S_F, TBT SLO S_B and weight w:

=========  ==========================================
waiting    ``(t - t_arr) - S_F - delta_f``
rotary     ``alpha * ((t - t_last) - S_B - delta_b)``
running    ``-(t - t_run)``
=========  ==========================================

then ``w * VLT`` where VLT > 0 and ``VLT / w`` otherwise (monotone and sign-preserving). Positive VLT
means behind the SLO. Ties in the ranking go to the earlier arrival, then the smaller id.
"""

from __future__ import annotations

import numpy as np

from superinfer.core.types import Params, Phase, Snapshot, TenantTable


def compute_vlt(snap: Snapshot, tenants: TenantTable, params: Params, now: float) -> np.ndarray:
    """VLT in seconds for every row of ``snap`` (vectorised: one gather per (phase, tenant) table)."""
    n_ten = len(tenants)
    idx = snap.phase.astype(np.intp) * n_ten + snap.tenant  # row of the (phase, tenant) tables below
    offset = np.concatenate([tenants.ttft_slo + params.delta_f, tenants.tbt_slo + params.delta_b, np.zeros(n_ten)])
    scale = np.repeat(np.array([1.0, params.alpha, -1.0]), n_ten)
    weight = np.tile(tenants.weight, 3)[idx]
    since = np.where(snap.phase == Phase.WAITING, snap.t_arr, np.where(snap.phase == Phase.ROTARY, snap.t_last, snap.t_run))
    vlt = now - since
    vlt -= offset[idx]
    vlt *= scale[idx]
    vlt *= np.where(vlt > 0, weight, 1.0 / weight)
    return vlt


def rank_desc(vlt: np.ndarray, t_arr: np.ndarray, req_id: np.ndarray) -> np.ndarray:
    """Row order by VLT descending; ties to the earlier arrival, then the smaller id."""
    return np.lexsort((req_id, t_arr, -vlt))


def top_rows(key: np.ndarray, rows: np.ndarray, k: int, tie1: np.ndarray, tie2: np.ndarray) -> np.ndarray:
    """The ``k`` rows (of ``rows``) with the largest ``key``, sorted by (key desc, tie1, tie2).

    Exact under ties: every row whose key equals the k-th largest is included before sorting, so the
    result is a prefix of the full sort. Costs O(n) plus a sort of about k rows.
    """
    n = rows.shape[0]
    if k >= n:
        sub = key[rows]
        return rows[np.lexsort((tie2[rows], tie1[rows], -sub))]
    sub = key[rows]
    kth = np.partition(-sub, k - 1)[k - 1]
    chosen = rows[-sub <= kth]
    order = np.lexsort((tie2[chosen], tie1[chosen], -key[chosen]))
    return chosen[order][:k] if chosen.shape[0] > k else chosen[order]
