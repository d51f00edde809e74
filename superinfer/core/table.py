"""The one request table: a row per live request, columns as numpy arrays, and its state changes.

Engines keep their requests here and planning reads it with one gather per column
(:meth:`RequestTable.snapshot`): the simulator keys rows by its integer request ids, the vLLM plugin by
vLLM's request-id strings. The state changes a request goes through are methods, written once:

=====================  ===============================================================================
:meth:`add`            a new waiting request
:meth:`preempted`      taken out of the batch; its KV kept where the engine says (``num_computed``)
:meth:`joined`         entered the batch (admitted, re-prefilled, or its swap-in completed)
:meth:`token_sampled`  produced an output token at a time
:meth:`tick`           one iteration passed (residency counters advance)
:meth:`remove`         finished or aborted; the row is recycled
=====================  ===============================================================================

``version`` counts membership changes (:meth:`add`, :meth:`remove`, :meth:`preempted`, :meth:`joined`
of at least one row): equal versions mean the same requests hold the same places (waiting, rotary or
running), which is what :class:`~superinfer.core.gate.PlanGate` needs to know.

Block columns (``blocks_hbm``, ``blocks_dram``, ``synced``, ``syncing``, ``h2d_pending``) belong to
whoever keeps the bytes: the engine writes them from its ledger.

Invariants: every live request has exactly one row and ``len(table)`` rows are live; ``req_id`` (the
core's id) is the key itself for integer keys and an arrival sequence number otherwise, so ties in the
core's ranking go to arrival order either way; rows of removed requests are recycled, their columns
reset on reuse.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

import numpy as np

from superinfer.core.types import FLOAT_COLUMNS, FRESH_RESIDENCY, INT_COLUMNS, Phase, Snapshot

#: Columns beyond a snapshot's: prompt length and the output target.
EXTRA_INT_COLUMNS = ("num_prompt", "target_output")
EXTRA_FLOAT_COLUMNS: tuple[str, ...] = ()
_I64 = INT_COLUMNS + EXTRA_INT_COLUMNS
_F64 = FLOAT_COLUMNS + EXTRA_FLOAT_COLUMNS
_DTYPES = {**{c: np.int64 for c in _I64}, **{c: np.float64 for c in _F64}, "phase": np.int8, "busy": np.bool_}


class RequestTable:
    """Rows of live requests keyed by any hashable id. Columns are public arrays indexed by row, one per
    :class:`~superinfer.core.types.Snapshot` field (declared there, once) plus :data:`EXTRA_INT_COLUMNS`
    and :data:`EXTRA_FLOAT_COLUMNS`; :meth:`_grow` creates them."""

    def __init__(self, capacity: int = 1024) -> None:
        self._cap = 0
        self._row: dict[Hashable, int] = {}  # key -> row
        self._key: dict[int, Hashable] = {}  # core id -> key (only for keys that are not ints)
        self._row_key: list[Hashable | None] = []  # row -> key of its live request
        self._free: list[int] = []
        self._next_seq = 0
        self._int_keys: bool | None = None  # one table holds one kind of key
        self._live_rows: np.ndarray | None = None
        self.version = 0  # membership changes so far (module docstring)
        self.live = np.zeros(0, np.bool_)
        self._grow(max(16, capacity))

    def _grow(self, cap: int) -> None:
        for name, dtype in _DTYPES.items():
            col = np.zeros(cap, dtype)
            old = getattr(self, name, None)
            if old is not None:
                col[: self._cap] = old
            setattr(self, name, col)
        live = np.zeros(cap, np.bool_)
        live[: self._cap] = self.live
        self.live = live
        self._row_key.extend([None] * (cap - self._cap))
        self._free = list(range(cap - 1, self._cap - 1, -1)) + self._free
        self._cap = cap

    # ---- lookups -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._row

    def keys(self) -> Iterator[Hashable]:
        """Keys of the live requests (a snapshot of them: safe to remove while iterating)."""
        return iter(list(self._row))

    def row_of(self, key: Hashable) -> int:
        return self._row[key]

    def get_row(self, key: Hashable) -> int | None:
        return self._row.get(key)

    def rows_of(self, req_ids: np.ndarray) -> np.ndarray:
        """Rows of the live requests whose *core ids* are ``req_ids``."""
        if self._key:
            row, key = self._row, self._key
            return np.fromiter((row[key[i]] for i in req_ids.tolist()), np.int64, req_ids.shape[0])
        row = self._row
        return np.fromiter((row[i] for i in req_ids.tolist()), np.int64, req_ids.shape[0])

    def rows_of_keys(self, keys: list[Hashable]) -> np.ndarray:
        """Rows of the live requests whose keys are ``keys``."""
        row = self._row
        return np.fromiter((row[k] for k in keys), np.int64, len(keys))

    def key_at(self, r: int) -> Hashable | None:
        """The key of the live request in row ``r`` (None for a free row)."""
        return self._row_key[r]

    def key_of(self, req_id: int) -> Hashable | None:
        """The key of the live request whose core id is ``req_id`` (None if it left)."""
        key = self._key.get(req_id, req_id)
        return key if key in self._row else None

    def live_rows(self) -> np.ndarray:
        """Rows of the live requests, ascending (the row order of :meth:`snapshot`)."""
        if self._live_rows is None:
            self._live_rows = np.flatnonzero(self.live)
        return self._live_rows

    def phase_counts(self) -> list[int]:
        """Live requests per phase, ``[waiting, rotary, running]`` (:class:`~superinfer.core.types.Phase`)."""
        rows = self.live_rows()
        return np.bincount(self.phase[rows], minlength=3).tolist() if rows.shape[0] else [0, 0, 0]

    def snapshot(self) -> Snapshot:
        """The core's view of every live row, in :meth:`live_rows` order (no validation)."""
        return Snapshot.gather(self, self.live_rows())

    # ---- state changes -------------------------------------------------------------------------
    def add(self, key: Hashable, t_arr: float, num_prompt: int, *, target_output: int = 0, tenant: int = 0,
            priority: int = 0, pred_remaining: float = 0.0) -> int:
        """A new waiting request; returns its row. Raises ``ValueError`` on a duplicate key."""
        if key in self._row:
            raise ValueError(f"request table: duplicate request id {key!r}")
        int_key = isinstance(key, (int, np.integer)) and not isinstance(key, bool)
        if self._int_keys is None:
            self._int_keys = int_key
        elif int_key != self._int_keys:
            raise ValueError(f"request table: key {key!r} mixes integer and other keys in one table")
        if not self._free:
            self._grow(self._cap * 2)
        r = self._free.pop()
        if int_key:
            core_id = int(key)
        else:
            core_id = self._next_seq
            self._next_seq += 1
            self._key[core_id] = key
        self._row[key] = r
        self._row_key[r] = key
        for name in _I64 + _F64:
            getattr(self, name)[r] = 0
        self.req_id[r] = core_id
        self.tenant[r] = tenant
        self.priority[r] = priority
        self.num_prompt[r] = num_prompt
        self.num_tokens[r] = num_prompt
        self.target_output[r] = target_output
        self.residency[r] = FRESH_RESIDENCY
        self.t_arr[r] = self.t_last[r] = self.t_run[r] = t_arr
        self.t_first[r] = np.nan
        self.pred_remaining[r] = pred_remaining
        self.phase[r] = Phase.WAITING
        self.busy[r] = False
        self.live[r] = True
        self._live_rows = None
        self.version += 1
        return r

    def remove(self, key: Hashable) -> int | None:
        """The request left (finished or aborted); returns its freed row (None if unknown). The row's
        columns keep their values until the row is reused."""
        r = self._row.pop(key, None)
        if r is None:
            return None
        self._key.pop(int(self.req_id[r]), None)
        self._row_key[r] = None
        self.live[r] = False
        self._live_rows = None
        self._free.append(r)
        self.version += 1
        return r

    def preempted(self, r: int, num_computed: int) -> None:
        """Row ``r`` left the batch with KV for ``num_computed`` tokens kept (in either tier): it waits
        again (no output yet) or rotates (has output), one more rotation, residency restarts."""
        self.num_computed[r] = num_computed
        self.phase[r] = Phase.ROTARY if self.outputs[r] > 0 else Phase.WAITING
        self.rotations[r] += 1
        self.residency[r] = 0
        self.busy[r] = False
        self.version += 1

    def joined(self, rows: np.ndarray | int, now: float, *, swapped_in: bool) -> None:
        """``rows`` entered the batch at ``now``. A swap-in that completed starts its minimum residency
        (residency 0); an admission or re-prefill is fresh (no residency guard)."""
        if np.size(rows) == 0:
            return
        self.version += 1
        self.phase[rows] = Phase.RUNNING
        self.t_run[rows] = now
        self.residency[rows] = 0 if swapped_in else FRESH_RESIDENCY
        if swapped_in:
            self.busy[rows] = False

    def token_sampled(self, rows: np.ndarray, t: float, outputs: np.ndarray | None = None) -> None:
        """``rows`` produced output at ``t``: one more token each, or ``outputs`` tokens in all (an
        engine that reports counts). The first token sets ``t_first``."""
        first = rows[np.isnan(self.t_first[rows])]
        self.t_first[first] = t
        if outputs is None:
            self.outputs[rows] += 1
        else:
            self.outputs[rows] = outputs
        self.t_last[rows] = t

    def tick(self) -> None:
        """One iteration passed: residency counters of live rows advance, saturating at FRESH."""
        rows = self.live_rows()
        self.residency[rows] = np.minimum(self.residency[rows] + 1, FRESH_RESIDENCY)
