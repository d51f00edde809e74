"""The SLO-aware token budget of RotaSched v2 (``superinfer.core.budget.slo_token_budget``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from superinfer.core import slo_token_budget


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
