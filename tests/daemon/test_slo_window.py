"""The per-tenant SLO window of ``/v1/state`` (``SloWindow``) and the SLO counters of ``/metrics``
(``DaemonMetrics``): both SLOs per request, pooled inter-token gaps, rotations per finished request."""

from __future__ import annotations

import numpy as np
import pytest

from superinfer.daemon.backends.vllm_stream import is_token_event
from superinfer.daemon.metrics import DaemonMetrics
from superinfer.daemon.stats import SloWindow

NAMES = ["chat", "voice"]
S_F, S_B = 2.0, 0.1  # the SLOs these tests judge against


def request(w: SloWindow, tenant: str, ttft_s: float, gaps: list[float], now: float) -> None:
    """What a backend records for one finished request: first token, its gaps, its finish."""
    w.first_token(tenant, ttft_s, ttft_s <= S_F, now)
    w.gaps(tenant, gaps, now, slo_s=S_B)
    mean = float(np.mean(gaps)) if gaps else 0.0
    w.finished(tenant, mean, mean <= S_B, now, ttft_ok=ttft_s <= S_F)


def test_meeting_ttft_but_missing_tbt_counts_against_slo_attainment():
    w = SloWindow(NAMES, 60.0)
    request(w, "chat", 0.5, [0.05, 0.05], 100.0)  # both met
    request(w, "chat", 0.5, [0.3, 0.3], 100.0)  # TTFT met, TBT missed
    request(w, "chat", 3.0, [0.05], 100.0)  # TTFT missed, TBT met
    request(w, "chat", 1.0, [], 100.0)  # one token: TBT met (as the simulator), TTFT met
    s = w.summary(now=100.0)["chat"]
    assert s["requests"] == s["finished"] == 4
    assert s["ttft_attainment"] == 0.75
    assert s["tbt_attainment"] == 0.75
    assert s["slo_attainment"] == 0.5, "only requests meeting both count"
    assert s["slo_attainment"] <= min(s["ttft_attainment"], s["tbt_attainment"])
    assert w.summary(now=100.0)["voice"]["slo_attainment"] is None, "nothing finished: unknown, not 0"


def test_pooled_gap_attainment_differs_from_per_request_tbt():
    w = SloWindow(NAMES, 60.0)
    # three smooth requests (2 gaps each within S_B) and one that stalls at every token (10 bad gaps)
    for _ in range(3):
        request(w, "chat", 0.1, [0.05, 0.05], 10.0)
    request(w, "chat", 0.1, [0.5] * 10, 10.0)
    s = w.summary(now=10.0)["chat"]
    assert s["tbt_attainment"] == 0.75, "per request: 3 of 4"
    assert s["tbt_gaps"] == 16
    assert s["tbt_gap_attainment"] == 0.375, "pooled: 6 of 16 gaps, the stalling request weighs 10"
    # the other way round: one long stall in a request of short gaps misses per request, not pooled
    request(w, "voice", 0.1, [0.01] * 9 + [2.0], 10.0)
    v = w.summary(now=10.0)["voice"]
    assert v["tbt_attainment"] == 0.0 and v["slo_attainment"] == 0.0
    assert v["tbt_gap_attainment"] == 0.9


def test_a_gap_equal_to_the_slo_attains_it_and_gaps_returns_the_count():
    w = SloWindow(NAMES, 60.0)
    assert w.gaps("chat", np.array([S_B, S_B + 1e-9, 0.0]), 1.0, slo_s=S_B) == 2
    assert w.gaps("chat", [], 1.0, slo_s=S_B) == 0
    s = w.summary(now=1.0)["chat"]
    assert s["tbt_gaps"] == 3 and s["tbt_gap_attainment"] == round(2 / 3, 6)
    assert w.summary(now=1.0)["voice"]["tbt_gap_attainment"] is None


def test_window_forgets_old_outcomes_gaps_and_rotations():
    w = SloWindow(NAMES, 10.0)
    w.track_rotations()
    request(w, "chat", 0.1, [0.5, 0.5], 0.0)  # a miss, old
    w.rotated("chat", 5, 0.0)
    request(w, "chat", 0.1, [0.05], 8.0)  # a hit, recent
    w.rotated("chat", 1, 8.0)
    early = w.summary(now=9.0)["chat"]
    assert (early["finished"], early["slo_attainment"], early["tbt_gaps"], early["rotations"]) == (2, 0.5, 3, 6)
    assert early["rotations_per_finished"] == 3.0
    late = w.summary(now=15.0)["chat"]
    assert (late["finished"], late["slo_attainment"], late["tbt_gaps"], late["tbt_gap_attainment"]) == (1, 1.0, 1, 1.0)
    assert late["rotations"] == 1 and late["rotations_per_finished"] == 1.0
    gone = w.summary(now=100.0)["chat"]
    assert gone["finished"] == 0 and gone["slo_attainment"] is None and gone["tbt_gap_attainment"] is None
    assert gone["rotations"] == 0 and gone["rotations_per_finished"] is None


def test_rotations_are_unknown_until_the_backend_tracks_them():
    w = SloWindow(NAMES, 60.0)
    request(w, "chat", 0.1, [0.05], 1.0)
    s = w.summary(now=1.0)["chat"]
    assert s["rotations"] is None and s["rotations_per_finished"] is None, "vllm: not attributed, not zero"
    w.rotated("voice", 0, 1.0)  # a tracking backend, no rotation yet
    s = w.summary(now=1.0)
    assert s["chat"]["rotations"] == 0 and s["chat"]["rotations_per_finished"] == 0.0
    assert s["voice"]["rotations"] == 0 and s["voice"]["rotations_per_finished"] is None  # nothing finished


def test_gap_counts_are_exact_beyond_the_sample_cap():
    """Gap attainment counts every gap in the window, however many; percentiles use the newest samples."""
    w = SloWindow(NAMES, 60.0, max_samples=10)
    rng = np.random.default_rng(0)
    total = ok = 0
    for i in range(500):
        g = rng.exponential(0.08, 37)
        total += g.size
        ok += int((g <= S_B).sum())
        w.gaps("chat", g, 1.0 + i * 0.01, slo_s=S_B)
    s = w.summary(now=6.0)["chat"]
    assert s["tbt_gaps"] == total == 18500
    assert s["tbt_gap_attainment"] == round(ok / total, 6)


def test_validation_raises_with_messages():
    with pytest.raises(ValueError, match="window_s"):
        SloWindow(NAMES, 0.0)
    with pytest.raises(ValueError, match="tenant"):
        SloWindow([], 60.0)
    with pytest.raises(ValueError, match="max_samples"):
        SloWindow(NAMES, 60.0, max_samples=0)
    w = SloWindow(NAMES, 60.0)
    with pytest.raises(ValueError, match="rotations"):
        w.rotated("chat", -1)
    with pytest.raises(ValueError, match="one-dimensional"):
        w.gaps("chat", np.zeros((2, 2)), slo_s=S_B)
    with pytest.raises(KeyError):
        w.finished("nobody", 0.0, True, ttft_ok=True)


# ---- /metrics ------------------------------------------------------------------------------------


def _value(m: DaemonMetrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    assert v is not None, (name, labels)
    return v


def test_both_slo_counters_count_each_request_once_and_a_ttft_miss_at_its_first_token():
    m = DaemonMetrics(NAMES, backend="sim", profile="t", model="m", simulation=True)
    both = ("superinfer_slo_attained_total", "superinfer_slo_violations_total")
    assert [_value(m, n, tenant="chat", slo="both") for n in both] == [0.0, 0.0], "children exist from the start"
    m.observe_first_token("chat", 3.0, False)
    assert _value(m, both[1], tenant="chat", slo="both") == 1.0, "a TTFT miss decides 'both' at once"
    m.observe_finished("chat", True, False)  # that request finishes with a good TBT: counted already
    m.observe_first_token("chat", 0.5, True)
    assert _value(m, both[1], tenant="chat", slo="both") == 1.0, "a TTFT hit decides nothing yet"
    m.observe_finished("chat", False, True)  # TTFT met, TBT missed
    m.observe_first_token("chat", 0.5, True)
    m.observe_finished("chat", True, True)  # both met
    m.observe_finished("chat", True, None)  # finished without an observed first token: a miss
    assert _value(m, both[0], tenant="chat", slo="both") == 1.0
    assert _value(m, both[1], tenant="chat", slo="both") == 3.0
    assert _value(m, both[0], tenant="chat", slo="tbt") == 3.0 and _value(m, both[1], tenant="chat", slo="tbt") == 1.0
    assert _value(m, "superinfer_requests_finished_total", tenant="chat") == 4.0
    assert _value(m, both[0], tenant="voice", slo="both") == 0.0


def test_gap_counters_pair_with_the_gap_histogram():
    m = DaemonMetrics(NAMES, backend="sim", profile="t", model="m", simulation=True)
    m.observe_gaps("voice", [0.01, 0.2, 0.05], 2)
    m.observe_gap("voice", 0.3, False)
    m.observe_gaps("voice", [], 0)
    assert _value(m, "superinfer_inter_token_slo_attained_total", tenant="voice") == 2.0
    assert _value(m, "superinfer_inter_token_slo_violations_total", tenant="voice") == 2.0
    assert _value(m, "superinfer_inter_token_seconds_count", tenant="voice") == 4.0
    assert _value(m, "superinfer_inter_token_slo_attained_total", tenant="chat") == 0.0
    with pytest.raises(ValueError, match="n_ok"):
        m.observe_gaps("voice", [0.01], 2)
    m.t_rotations["chat"].inc(3)
    assert _value(m, "superinfer_tenant_rotations_total", tenant="chat") == 3.0


# ---- the vllm proxy's view of a stream -----------------------------------------------------------


@pytest.mark.parametrize("line, token", [
    ('data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":" the"}]}', True),
    ('data: {"id":"c","choices":[{"index":0,"text":"","finish_reason":"length"}]}', True),
    ('data: {"id":"c","choices":[{"index":0,"delta":{"content":"say \\"role\\": x"}}]}', True),
    ('data: {"id":"c","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":8}}', False),
    ('data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}', False),
    ("data: [DONE]", False),
    ("", False),
    (": keep-alive", False),
])
def test_the_proxy_times_events_that_carry_output(line, token):
    assert is_token_event(line) is token
