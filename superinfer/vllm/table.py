"""The scheduler core's view of vLLM's requests, kept as columns and updated incrementally.

vLLM keeps one ``Request`` object per request; the core wants a struct of arrays. Rebuilding the arrays
from thousands of waiting requests every step would cost milliseconds, so :class:`RequestTable` keeps a
row per live request and the scheduler writes only what changed: running requests every step (they
grow), other requests on events (arrival, preemption, admission, finish). ``snapshot()`` is then a
handful of numpy gathers.

Invariants: every live vLLM request has exactly one row; ``seq`` (the core's ``req_id``) increases with
arrival, so the core's id tie-break is arrival order; rows of finished requests are recycled.
"""

from __future__ import annotations

import numpy as np

from superinfer.core import Phase, Snapshot

_I64 = ("seq", "tenant", "num_tokens", "num_computed", "blocks_hbm", "blocks_dram", "synced", "syncing",
        "residency", "rotations", "priority", "outputs")
_F64 = ("t_arr", "t_last", "t_run", "t_first")
FRESH_RESIDENCY = 1 << 30  # "never swapped in": no minimum-residency guard applies


class RequestTable:
    """Rows of live requests; columns are public numpy arrays indexed by row."""

    def __init__(self, capacity: int = 1024) -> None:
        self._cap = 0
        self.row: dict[str, int] = {}  # vLLM request id -> row
        self.name: list[str | None] = []  # row -> vLLM request id
        self.by_seq: dict[int, str] = {}  # core id -> vLLM request id
        self._free: list[int] = []
        self._next_seq = 0
        self._live_rows: np.ndarray | None = None
        self.live = np.zeros(0, np.bool_)
        self._grow(max(16, capacity))

    def _grow(self, cap: int) -> None:
        for name in _I64 + _F64 + ("phase", "busy"):
            dtype = np.int64 if name in _I64 else np.float64 if name in _F64 else np.int8 if name == "phase" else np.bool_
            col = np.zeros(cap, dtype)
            old = getattr(self, name, None)
            if old is not None:
                col[: self._cap] = old
            setattr(self, name, col)
        live = np.zeros(cap, np.bool_)
        live[: self._cap] = self.live
        self.live = live
        self.name.extend([None] * (cap - self._cap))
        self._free = list(range(cap - 1, self._cap - 1, -1)) + self._free
        self._cap = cap

    def __len__(self) -> int:
        return len(self.row)

    def __contains__(self, req_id: str) -> bool:
        return req_id in self.row

    def add(self, req_id: str, t_arr: float, num_tokens: int, tenant: int, priority: int = 0) -> int:
        """A new waiting request. Raises ValueError on a duplicate id."""
        if req_id in self.row:
            raise ValueError(f"request table: duplicate request id {req_id!r}")
        if not self._free:
            self._grow(self._cap * 2)
        r = self._free.pop()
        seq = self._next_seq
        self._next_seq += 1
        self.row[req_id] = r
        self.name[r] = req_id
        self.by_seq[seq] = req_id
        for col in _I64 + _F64:
            getattr(self, col)[r] = 0
        self.seq[r] = seq
        self.tenant[r] = tenant
        self.priority[r] = priority
        self.num_tokens[r] = num_tokens
        self.t_arr[r] = self.t_last[r] = self.t_run[r] = t_arr
        self.t_first[r] = np.nan
        self.residency[r] = FRESH_RESIDENCY
        self.phase[r] = Phase.WAITING
        self.busy[r] = False
        self.live[r] = True
        self._live_rows = None
        return r

    def remove(self, req_id: str) -> None:
        r = self.row.pop(req_id, None)
        if r is None:
            return
        del self.by_seq[int(self.seq[r])]
        self.name[r] = None
        self.live[r] = False
        self._live_rows = None
        self._free.append(r)

    def live_rows(self) -> np.ndarray:
        if self._live_rows is None:
            self._live_rows = np.flatnonzero(self.live)
        return self._live_rows

    def tick(self) -> None:
        """One scheduler iteration passed: residency counters advance (saturating)."""
        rows = self.live_rows()
        res = self.residency[rows]
        self.residency[rows] = np.where(res < FRESH_RESIDENCY, res + 1, res)

    def snapshot(self) -> Snapshot:
        """The core's snapshot of all live rows, in row order (see :meth:`live_rows`)."""
        rows = self.live_rows()
        n = rows.shape[0]
        return Snapshot.gather(self, rows, req_id=self.seq[rows], h2d_pending=np.zeros(n, np.int64),
                               pred_remaining=np.zeros(n, np.float64))
