"""The one request table (``superinfer.core.table``): keys, rows, state changes, and the snapshot.

The simulator keys it by integer request ids and the vLLM plugin by request-id strings; both go through
these methods, so these tests specify both engines' bookkeeping.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.core import FRESH_RESIDENCY, Phase, RequestTable


def table_with(*keys, t_arr: float = 0.0) -> RequestTable:
    t = RequestTable(capacity=4)
    for i, k in enumerate(keys):
        t.add(k, t_arr + i, 10 + i, target_output=5, tenant=i % 2)
    return t


def test_string_keys_get_arrival_sequence_ids_and_map_back():
    t = table_with("a", "b", "c")
    rows = t.rows_of_keys(["a", "b", "c"])
    assert t.req_id[rows].tolist() == [0, 1, 2]
    assert [t.key_of(i) for i in (0, 1, 2)] == ["a", "b", "c"]
    t.remove("b")
    assert t.key_of(1) is None and "b" not in t and len(t) == 2
    t.add("d", 9.0, 4)
    assert t.req_id[t.row_of("d")] == 3  # ids never reused: ties stay in arrival order


def test_integer_keys_are_the_core_ids():
    t = table_with(7, 3, 11)
    assert t.key_of(3) == 3 and t.key_of(4) is None
    assert t.req_id[t.rows_of(np.array([11, 7]))].tolist() == [11, 7]


def test_mixing_key_kinds_and_duplicates_are_refused():
    t = table_with("a")
    with pytest.raises(ValueError, match="mixes"):
        t.add(5, 0.0, 1)
    with pytest.raises(ValueError, match="duplicate"):
        t.add("a", 0.0, 1)


def test_new_request_waits_fresh():
    t = table_with("a")
    r = t.row_of("a")
    assert t.phase[r] == Phase.WAITING and t.residency[r] == FRESH_RESIDENCY
    assert np.isnan(t.t_first[r]) and t.num_tokens[r] == t.num_prompt[r] == 10 and t.target_output[r] == 5


def test_life_of_a_request():
    t = table_with("a")
    r = t.row_of("a")
    t.joined(r, 1.0, swapped_in=False)
    assert (t.phase[r], t.t_run[r], t.residency[r]) == (Phase.RUNNING, 1.0, FRESH_RESIDENCY)
    t.token_sampled(np.array([r]), 2.0)
    assert (t.outputs[r], t.t_first[r], t.t_last[r]) == (1, 2.0, 2.0)
    t.token_sampled(np.array([r]), 2.5)
    assert (t.outputs[r], t.t_first[r], t.t_last[r]) == (2, 2.0, 2.5)
    t.preempted(r, 8)
    assert (t.phase[r], t.num_computed[r], t.rotations[r], t.residency[r]) == (Phase.ROTARY, 8, 1, 0)
    t.tick()
    assert t.residency[r] == 1
    t.busy[r] = True
    t.joined(r, 3.0, swapped_in=True)
    assert (t.phase[r], t.residency[r], bool(t.busy[r])) == (Phase.RUNNING, 0, False)


def test_preempted_before_first_token_waits_again():
    t = table_with("a")
    r = t.row_of("a")
    t.joined(r, 1.0, swapped_in=False)
    t.preempted(r, 0)
    assert t.phase[r] == Phase.WAITING


def test_engine_reported_output_counts():
    t = table_with("a", "b")
    rows = t.rows_of_keys(["a", "b"])
    t.token_sampled(rows, 4.0, np.array([3, 1]))
    assert t.outputs[rows].tolist() == [3, 1] and t.t_first[rows].tolist() == [4.0, 4.0]


def test_tick_saturates_at_fresh():
    t = table_with("a")
    t.tick()
    assert t.residency[t.row_of("a")] == FRESH_RESIDENCY


def test_grows_and_recycles_rows_with_reset_columns():
    t = RequestTable(capacity=16)
    for i in range(40):
        t.add(i, float(i), 3)
    assert len(t) == 40 and t.live_rows().shape[0] == 40
    r = t.row_of(5)
    t.preempted(r, 2)
    t.remove(5)
    t.add(100, 50.0, 7)
    r2 = t.row_of(100)
    assert r2 == r  # recycled
    assert (t.rotations[r2], t.num_computed[r2], t.phase[r2]) == (0, 0, Phase.WAITING)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "preempt", "join", "sample", "tick"]),
                          st.integers(0, 30)), max_size=120))
def test_rows_and_keys_stay_consistent(ops):
    """Any sequence of state changes: one row per live key, the snapshot is exactly the live rows in row
    order, and every core id maps back to its key."""
    t = RequestTable(capacity=16)
    live: set[str] = set()
    now = 0.0
    for op, k in ops:
        key = f"r{k}"
        now += 0.1
        if op == "add" and key not in live:
            t.add(key, now, 1 + k)
            live.add(key)
        elif op == "remove":
            assert (t.remove(key) is not None) == (key in live)
            live.discard(key)
        elif key in live and op == "preempt":
            t.preempted(t.row_of(key), 0)
        elif key in live and op == "join":
            t.joined(t.row_of(key), now, swapped_in=k % 2 == 0)
        elif key in live and op == "sample":
            t.token_sampled(np.array([t.row_of(key)]), now)
        elif op == "tick":
            t.tick()
    assert len(t) == len(live) and set(t.keys()) == live
    rows = t.live_rows()
    assert sorted(t.row_of(k) for k in live) == rows.tolist()
    snap = t.snapshot()
    assert len(snap) == len(live)
    assert {t.key_of(int(i)) for i in snap.req_id} == live
    assert np.all(snap.residency <= FRESH_RESIDENCY) and np.all(snap.residency >= 0)


def test_key_at_names_the_request_in_a_row():
    t = table_with("a", "b")
    r = t.row_of("b")
    assert t.key_at(r) == "b"
    t.remove("b")
    assert t.key_at(r) is None
