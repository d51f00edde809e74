"""The SLO-aware token budget of RotaSched v2 (``superinfer.core.budget``): the largest prefill that fits a
step target, and the target a batch's decodes allow."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from superinfer.core import batch_token_budget, slo_token_budget
from superinfer.core.budget import MAX_STRETCH, step_target_s
from superinfer.core.types import Phase


def linear(base: float, per_token: float):
    return lambda p: base + per_token * p


def test_cuts_prefill_so_the_step_fits_the_target():
    # 10 ms fixed + 0.1 ms per prefill token; target 60.05 ms: 500 prefill tokens fit, 501 do not.
    assert slo_token_budget(linear(0.010, 0.0001), 0.06005, decodes=32, max_tokens=8192) == 32 + 500


def test_nothing_to_protect_or_everything_fits_keeps_the_full_budget():
    assert slo_token_budget(linear(1.0, 1.0), 0.1, decodes=0, max_tokens=8192) == 8192
    assert slo_token_budget(linear(0.0, 0.0), 0.1, decodes=10, max_tokens=8192) == 8192


def test_decodes_are_never_cut():
    assert slo_token_budget(linear(0.5, 0.001), 0.1, decodes=64, max_tokens=8192) == 64


@given(st.floats(0.0, 0.2), st.floats(1e-6, 1e-3), st.floats(0.01, 0.5), st.integers(0, 300), st.integers(1, 16384))
def test_the_budget_is_the_largest_that_fits(base, per_token, target, decodes, max_tokens):
    f = linear(base, per_token)
    b = slo_token_budget(f, target, decodes, max_tokens)
    assert min(decodes, max_tokens) <= b <= max_tokens
    if b < max_tokens and b > decodes:
        assert f(b - decodes) <= target < f(b - decodes + 1)


# ---- the step target of a batch (step_target_s / batch_token_budget) ------------------------------------


def batch(outputs: list[int], since_first: list[float], tenant: list[int], now: float = 100.0) -> SimpleNamespace:
    """Running decodes: ``outputs[i]`` tokens so far, the first ``since_first[i]`` seconds ago."""
    n = len(outputs)
    return SimpleNamespace(phase=np.full(n, int(Phase.RUNNING)), outputs=np.array(outputs),
                           t_first=now - np.array(since_first), tenant=np.array(tenant),
                           num_tokens=np.array(outputs) + 101, num_computed=np.array(outputs) + 100)


def test_a_decode_with_no_slack_holds_the_step_to_its_slo():
    cols = batch([10, 50], [2.0, 1.0], [0, 0])  # the first is 1 s behind its 100 ms SLO
    assert step_target_s(cols, np.arange(2), np.array([0.1]), 100.0, 0.8) == 0.8 * 0.1


def test_banked_slack_stretches_the_step_at_most_max_stretch_times():
    cols = batch([100, 200], [4.0, 8.0], [0, 0])  # rooms 10 - 4 = 6 s and 20 - 8 = 12 s
    assert step_target_s(cols, np.arange(2), np.array([0.1]), 100.0, 1.0) == MAX_STRETCH * 0.1
    cols = batch([10], [0.85], [0])  # room 0.15 s
    assert step_target_s(cols, np.arange(1), np.array([0.1]), 100.0, 1.0) == pytest.approx(0.15)


@given(st.lists(st.tuples(st.integers(1, 2000), st.floats(0.0, 300.0), st.integers(0, 1)), min_size=1, max_size=20),
       st.floats(0.01, 0.5), st.floats(0.01, 0.5), st.floats(0.1, 1.5))
def test_the_target_lies_between_the_slo_and_max_stretch_times_it(rows, slo_a, slo_b, share):
    outputs, since, tenant = (list(c) for c in zip(*rows))
    cols = batch(outputs, since, tenant)
    slo = np.array([slo_a, slo_b])
    tight = float(slo[np.array(tenant)].min())
    target = step_target_s(cols, np.arange(len(rows)), slo, 100.0, share)
    assert share * tight <= target <= share * MAX_STRETCH * tight * (1 + 1e-12)
    # the step it allows keeps every decode's mean gap within its SLO, or within the tight share of it
    room = slo[np.array(tenant)] * np.array(outputs) - np.array(since)
    assert target <= share * max(tight, float(room.min())) * (1 + 1e-12)


@given(st.lists(st.tuples(st.integers(1, 2000), st.floats(0.0, 300.0)), min_size=1, max_size=20),
       st.floats(0.001, 0.05), st.integers(0, 4096))
def test_an_idle_tenant_with_a_strict_slo_changes_nothing(rows, strict, prefill):
    """Issue 30's bug: the budget was sized to the tightest SLO of every configured tenant, idle or not."""
    outputs, since = (list(c) for c in zip(*rows))
    cols = batch(outputs, since, [0] * len(rows))
    cols.num_tokens[0] += prefill  # one request also has prompt tokens left: a chunk to size
    model = lambda p, pairs, d, kv, ctx: 0.01 + 1e-5 * p + 1e-4 * d  # noqa: E731
    alone = batch_token_budget(cols, np.arange(len(rows)), model, 0.8, np.array([0.1]), 100.0, 8192)
    with_idle = batch_token_budget(cols, np.arange(len(rows)), model, 0.8, np.array([0.1, strict]), 100.0, 8192)
    assert alone == with_idle
