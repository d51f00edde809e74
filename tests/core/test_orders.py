"""The partial sorts are the ranking key of ``rank_order``, partially: a prefix of the full order, ties
included, for any key (VLT, arrival, priority, predicted length)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.core.orders import sort_rows, stream_desc, top_rows
from superinfer.core.types import rank_order


@st.composite
def keyed_rows(draw, unique_ids: bool = True):
    """A table of ``n`` rows whose key and arrival take few values (many ties), and a subset of rows."""
    n = draw(st.integers(0, 300))
    key = np.array(draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)), np.float64) / 2
    t_arr = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.float64)
    if unique_ids:
        req_id = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(n).astype(np.int64) * 7
    else:  # full ties: only the row order is left to break them
        req_id = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int64)
    rows = np.flatnonzero(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), np.bool_))
    return key, t_arr, req_id, rows


def full_order(key, t_arr, req_id, rows):
    return rows[rank_order(key[rows], t_arr[rows], req_id[rows])]


@settings(max_examples=150, deadline=None)
@given(keyed_rows(), st.integers(1, 400))
def test_top_rows_is_a_prefix_of_rank_order(table, k):
    key, t_arr, req_id, rows = table
    assert top_rows(key, rows, k, t_arr, req_id).tolist() == full_order(key, t_arr, req_id, rows)[:k].tolist()


@settings(max_examples=100, deadline=None)
@given(keyed_rows(unique_ids=False), st.integers(1, 400))
def test_top_rows_is_a_prefix_of_rank_order_even_under_full_ties(table, k):
    key, t_arr, req_id, rows = table
    assert top_rows(key, rows, k, t_arr, req_id).tolist() == full_order(key, t_arr, req_id, rows)[:k].tolist()


@settings(max_examples=100, deadline=None)
@given(keyed_rows(unique_ids=False))
def test_stream_desc_yields_rank_order_in_chunks(table):
    key, t_arr, req_id, rows = table
    chunks = list(stream_desc(key, rows, t_arr, req_id))
    got = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    assert got.tolist() == full_order(key, t_arr, req_id, rows).tolist()
    assert all(c.shape[0] > 0 for c in chunks)


@settings(max_examples=100, deadline=None)
@given(keyed_rows(), st.data())
def test_orderings_are_sorts_a_subset_keeps_its_order(table, data):
    """The planner relies on it (``PolicySpec``): the order of a subset is the full order, filtered."""
    key, t_arr, req_id, rows = table
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=rows.shape[0], max_size=rows.shape[0])), np.bool_)
    subset = rows[keep]
    for order in (lambda r: full_order(key, t_arr, req_id, r), lambda r: sort_rows(r, t_arr, key, req_id)):
        whole = order(rows)
        assert order(subset).tolist() == whole[np.isin(whole, subset)].tolist()


def test_rank_order_is_vlt_descending_then_arrival_then_id():
    vlt = np.array([1.0, 2.0, 2.0, 2.0, -1.0])
    t_arr = np.array([0.0, 5.0, 3.0, 3.0, 0.0])
    req_id = np.array([10, 11, 13, 12, 14])
    assert req_id[rank_order(vlt, t_arr, req_id)].tolist() == [12, 13, 11, 10, 14]
