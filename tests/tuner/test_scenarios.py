"""The built-in phased scenarios of ``superinferd tune`` and ``bench tuner``
(superinfer/tuner/offline/scenario.py): each builds into one workload over its own tenant table with the
phases back to back; each ``-alt`` trace (a warm-start study's) has the same kinds of phase as its scenario
but is another trace; ``regimes`` holds both regimes: compute-bound chat and long-output reasoning."""

from __future__ import annotations

import numpy as np
import pytest

from superinfer.tuner.offline.scenario import SCENARIOS, build


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_scenario_builds_its_phases_back_to_back(name: str) -> None:
    scn = SCENARIOS[name]
    w, bounds = build(scn, seed=0)
    assert [b[0] for b in bounds] == [p.name for p in scn.phases]
    assert bounds[0][1] == 0.0 and bounds[-1][2] == pytest.approx(scn.duration_s)
    assert all(a[2] == b[1] for a, b in zip(bounds, bounds[1:]))
    assert len(w) > 0 and w.arrival_s.min() >= 0 and w.arrival_s.max() < scn.duration_s
    assert np.all(np.diff(w.arrival_s) >= 0)
    assert w.tenant_names == tuple(t.name for t in scn.tenants) and w.tenant_ids.max() < len(scn.tenants)


@pytest.mark.parametrize("name", sorted(n for n in SCENARIOS if f"{n}-alt" in SCENARIOS))
def test_the_alt_trace_has_the_same_kinds_of_phase_but_is_another_trace(name: str) -> None:
    scn, alt = SCENARIOS[name], SCENARIOS[f"{name}-alt"]
    assert {p.name for p in scn.phases} == {p.name for p in alt.phases}
    assert scn.phases != alt.phases and scn.tenants == alt.tenants


def test_regimes_holds_compute_bound_chat_and_long_output_reasoning() -> None:
    scn = SCENARIOS["regimes"]
    w, bounds = build(scn, seed=1)
    reasoning = w.tenant_names.index("reasoning")
    chat_out = w.output_tokens[w.tenant_ids == w.tenant_names.index("chat")]
    long_out = w.output_tokens[w.tenant_ids == reasoning]
    assert np.median(long_out) > 3 * np.median(chat_out)  # outputs that fill KV memory over their life
    for name, s, e in bounds:
        inside = (w.arrival_s >= s) & (w.arrival_s < e)
        assert (w.tenant_ids[inside] == reasoning).all() == (name == "reasoning")
