"""Orderings: the small pure functions that make one policy differ from another.

Each returns row indices of a :class:`~superinfer.core.types.Snapshot` in the order a policy visits
them. Candidate orders are *streams*: they sort only as far as the planner walks, so a 50,000-request
queue costs a partition, not a full sort.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from superinfer.core.vlt import top_rows


def stream_desc(key: np.ndarray, rows: np.ndarray, tie1: np.ndarray, tie2: np.ndarray) -> Iterator[int]:
    """Yield ``rows`` by (key desc, tie1 asc, tie2 asc), sorting lazily in growing chunks."""
    n = rows.shape[0]
    done = 0
    k = 64
    while done < n:
        k = min(n, max(k, done + 64))
        top = top_rows(key, rows, k, tie1, tie2)
        for r in top[done:].tolist():
            yield r
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
