"""Virtual Lag Time (design §3.1).

For request r at time t with its tenant's TTFT SLO S_F, TBT SLO S_B and weight w:

=========  ==========================================
waiting    ``(t - t_arr) - S_F - delta_f``
rotary     ``alpha * ((t - t_last) - S_B - delta_b)``
running    ``-(t - t_run)``
=========  ==========================================

then ``w * VLT`` where VLT > 0 and ``VLT / w`` otherwise (monotone and sign-preserving). Positive VLT
means behind the SLO. Largest-VLT-First ranks by :func:`~superinfer.core.types.rank_order` (ties to the
earlier arrival, then the smaller id).

``banked_tbt`` (RotaSched v2, ``lvf`` with ``tbt_credit`` 1): a rotary request's lag counts from the
deadline its *mean*-TBT budget sets, not from its last token: ``t_last`` moves later by the slack it banked
by then, ``S_B·(k−1) − (t_last − t_first)`` after k tokens (what ``tbt_attainment`` scores and what the slack
gate measures), credited up to its tenant's TTFT SLO ``S_F`` (a stream never waits for its next token longer
on that credit than a new request may wait for its first). Without it a parked request outranks every
waiting one S_B after it parked, however far ahead of its SLO it is, and fresh arrivals wait behind the
whole parked set.
"""

from __future__ import annotations

import numpy as np

from superinfer.core.types import Params, Phase, Snapshot, TenantTable


def compute_vlt(snap: Snapshot, tenants: TenantTable, params: Params, now: float, *,
                banked_tbt: bool = False) -> np.ndarray:
    """VLT in seconds for every row of ``snap``.

    Vectorised with one gather per term from small per-(phase, tenant) tables (phases in ``Phase``
    order: waiting, rotary, running). Each row's arithmetic is exactly the table above, in that order:
    ``((now - since) - offset) * scale``, then times ``w`` or ``1 / w``.
    """
    n, n_ten = len(snap), len(tenants)
    offset = np.concatenate([tenants.ttft_slo + params.delta_f, tenants.tbt_slo + params.delta_b, np.zeros(n_ten)])
    scale = np.repeat(np.array([1.0, params.alpha, -1.0]), n_ten)
    weight = np.tile(tenants.weight, 3)
    factor = np.stack((1.0 / weight, weight), axis=1).ravel()  # [2k]: VLT <= 0, [2k + 1]: VLT > 0
    phase = snap.phase.astype(np.intp)
    idx = phase * n_ten  # row of the tables above
    idx += snap.tenant
    # The clock each phase counts from (t_arr, t_last, t_run): row ``phase * n + r`` of the three columns.
    clock = phase * n
    clock += np.arange(n)
    since = np.concatenate((snap.t_arr, snap.t_last, snap.t_run)).take(clock)
    vlt = now - since
    vlt -= offset.take(idx)
    if banked_tbt:
        rot = np.flatnonzero(snap.phase == int(Phase.ROTARY))
        if rot.shape[0]:
            ten = snap.tenant[rot]
            banked = tenants.tbt_slo[ten] * (snap.outputs[rot] - 1) - (snap.t_last[rot] - snap.t_first[rot])
            vlt[rot] -= np.clip(np.nan_to_num(banked), 0.0, tenants.ttft_slo[ten])
    vlt *= scale.take(idx)
    idx *= 2
    idx += vlt > 0
    vlt *= factor.take(idx)
    return vlt
