"""Orderings: the small pure functions that make one policy differ from another, and the
:class:`PolicySpec` that names a policy's three orderings and its switches.

Each ordering returns row indices of a :class:`~superinfer.core.types.Snapshot` in the order a policy
visits them. Every ordering is a sort, exact under ties (see :class:`PolicySpec`). Candidate orders are
*streams*: they sort only as far as the planner walks, so a 50,000-request queue costs a partition, not
a full sort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from superinfer.core.types import Capacity, Params, Snapshot, TenantTable, rank_order

@dataclass
class Ctx:
    """Everything an ordering may look at. ``vlt`` is filled only for policies that rank by VLT."""

    snap: Snapshot
    cap: Capacity
    params: Params
    tenants: TenantTable
    now: float
    vlt: np.ndarray | None = None
    hopeless: np.ndarray | None = None  # per row: a waiting request already past its TTFT SLO (v2 only)


@dataclass(frozen=True)
class PolicySpec:
    """A scheduling policy as orderings plus switches.

    ``running_order(ctx, rows)``: the order running requests are served.
    ``victim_order(ctx, rows)``: running requests, first victim first.
    ``candidate_order(ctx, rows)``: waiting/rotary rows, first admitted first, as a stream of chunks
    (arrays of rows), so that a long queue is sorted only as far as the walk goes.

    Every ordering is a *sort* of the rows it is given: the order of a subset of rows is the order of
    the whole set with the other rows left out. The planner relies on it: it sorts the running requests
    once per plan for every use of the victim order, and resumes an admission walk over a subset of the
    candidates in the order the first walk would have met them.
    """

    name: str
    running_order: Callable[[Ctx, np.ndarray], np.ndarray]
    victim_order: Callable[[Ctx, np.ndarray], np.ndarray]
    candidate_order: Callable[[Ctx, np.ndarray], Iterator[np.ndarray]]
    decodes_first: bool = False
    discretionary: bool = False  # may preempt running requests to admit a candidate (LVF only)
    save_tail: bool = False  # victims copy their unsynced tail out (else it is recomputed)
    eager_sync: bool = False  # copy full blocks to DRAM as they fill
    admit_after_preempt: bool = False  # vLLM admits nothing in a step that preempted
    token_cap: Callable[[Params], int] | None = None  # sarathi's stall-free budget
    uses_vlt: bool = False
    slo_guards: bool = False  # RotaSched v2: slack gate, rotation margin, hopeless-last (Params knobs)


def top_rows(key: np.ndarray, rows: np.ndarray, k: int, tie1: np.ndarray, tie2: np.ndarray) -> np.ndarray:
    """The ``k`` rows (of ``rows``) ranked first by :func:`~superinfer.core.types.rank_order`'s key
    (``key`` descending, then ``tie1``, then ``tie2``): the same key as ``rank_order``, partially.

    The result is a prefix of ``rows[rank_order(key[rows], tie1[rows], tie2[rows])]``, ties included:
    every row whose key equals the k-th largest is kept before sorting. Costs O(n) plus a sort of about
    k rows.
    """
    if k < rows.shape[0]:
        neg = -key[rows]
        kth = np.partition(neg, k - 1)[k - 1]
        rows = rows[neg <= kth]
    order = rank_order(key[rows], tie1[rows], tie2[rows])[:k]
    return rows[order]


_FIRST_CHUNK = 64  # rows sorted by a stream's first partition; each later chunk is larger


def stream_desc(key: np.ndarray, rows: np.ndarray, tie1: np.ndarray, tie2: np.ndarray) -> Iterator[np.ndarray]:
    """``rows`` in :func:`top_rows` order (the same key as ``rank_order``), as chunks that are sorted
    only when the walk reaches them; each chunk is about four times the one before."""
    n = rows.shape[0]
    done = 0
    k = _FIRST_CHUNK
    while done < n:
        k = min(n, max(k, done + _FIRST_CHUNK))
        top = top_rows(key, rows, k, tie1, tie2)
        yield top[done:]
        done = top.shape[0]
        k *= 4


def sort_rows(rows: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """``rows`` sorted by ``keys`` (first key most significant), ascending, stable and exact."""
    if rows.shape[0] == 0:
        return rows
    return rows[np.lexsort(tuple(k[rows] for k in reversed(keys)))]


def fcfs_running(t_run: np.ndarray, t_arr: np.ndarray, req_id: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """vLLM's running list: admission order (approximated by (t_run, t_arr, id))."""
    return sort_rows(rows, t_run, t_arr, req_id)
