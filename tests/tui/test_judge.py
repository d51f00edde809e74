"""Classification against the target, percentiles against the SLO, trends, and the why line."""

from __future__ import annotations

import pytest

from superinfer.tui.judge import (BREACH, MIN_REQUESTS, OK, UNJUDGED, WARN, Context, classify, explain,
                                  judge_window, percentile_class, trend, warn_line, worst)


def test_classify_bands_against_the_target() -> None:
    assert warn_line(0.9) == pytest.approx(0.95)
    assert classify(0.96, 50, 0.9) == OK
    assert classify(0.95, 50, 0.9) == OK  # the warn line itself is OK
    assert classify(0.94, 50, 0.9) == WARN
    assert classify(0.90, 50, 0.9) == WARN  # meeting the target exactly is not a breach
    assert classify(0.899, 50, 0.9) == BREACH
    assert classify(0.5, 50, 0.99) == BREACH
    assert classify(0.996, 50, 0.99) == OK


def test_a_window_with_too_few_requests_is_never_judged() -> None:
    """A tenant with 3 requests all within SLO is "—", not a green 100 %."""
    assert classify(1.0, MIN_REQUESTS - 1, 0.9) == UNJUDGED
    assert classify(1.0, MIN_REQUESTS, 0.9) == OK
    assert classify(None, 100, 0.9) == UNJUDGED
    assert classify(0.0, 0, 0.9) == UNJUDGED
    assert classify(float("nan"), 100, 0.9) == UNJUDGED
    v = judge_window({"requests": 3, "finished": 3, "ttft_attainment": 1.0, "slo_attainment": 1.0}, 0.9)
    assert v.overall == UNJUDGED


def test_bad_target_raises_with_a_message() -> None:
    for bad in (0, 1.5, -0.1, True, "0.9"):
        with pytest.raises(ValueError, match="target attainment"):
            classify(0.9, 100, bad)  # type: ignore[arg-type]


def test_tenant_word_is_the_worse_of_ttft_and_both() -> None:
    w = {"requests": 40, "finished": 30, "ttft_attainment": 0.99, "slo_attainment": 0.85,
         "tbt_attainment": 0.99, "tbt_gaps": 5000, "tbt_gap_attainment": 0.93}
    v = judge_window(w, 0.9)
    assert (v.ttft, v.slo, v.tbt, v.gap, v.overall) == (OK, BREACH, OK, WARN, BREACH)
    assert worst(OK, UNJUDGED, WARN) == WARN and worst() == UNJUDGED
    # gaps need more samples than requests
    assert judge_window({**w, "tbt_gaps": 50}, 0.9).gap == UNJUDGED


def test_percentiles_against_the_slo() -> None:
    assert percentile_class(0.5, 1.0, p50=True) == OK
    assert percentile_class(1.0, 1.0, p50=True) == OK  # equal meets it (docs/daemon.md: every comparison is <=)
    assert percentile_class(1.2, 1.0, p50=True) == BREACH
    assert percentile_class(1.2, 1.0, p50=False) == WARN
    assert percentile_class(None, 1.0, p50=False) == UNJUDGED


def test_trend_needs_history_and_a_deadband() -> None:
    assert trend([], 100.0) == ("", None)
    assert trend([(95.0, 0.9), (100.0, 0.95)], 100.0) == ("", None)  # 5 s apart: too short for a 30 s trend
    arrow, delta = trend([(70.0, 0.90), (85.0, 0.92), (100.0, 0.95)], 100.0)
    assert arrow == "↑" and delta == pytest.approx(0.05)
    assert trend([(70.0, 0.95), (100.0, 0.90)], 100.0)[0] == "↓"
    assert trend([(70.0, 0.95), (100.0, 0.955)], 100.0)[0] == "→"
    # samples older than the span are ignored
    assert trend([(10.0, 0.1), (75.0, 0.95), (100.0, 0.95)], 100.0)[0] == "→"


def test_explain_names_the_cause() -> None:
    tenant = {"ttft_slo_s": 5.0, "tbt_slo_s": 0.1,
              "window": {"requests": 40, "finished": 35, "ttft_attainment": 0.7, "ttft_p99_s": 12.0,
                         "tbt_attainment": 1.0, "tbt_gap_attainment": 0.99, "slo_attainment": 0.72}}
    ctx = Context(now=1000.0, window_s=60.0, waiting=21, rotary=0, hbm_share=0.97)
    why = explain(tenant, 0.9, ctx)
    assert "TTFT misses 30%" in why and "12.0s vs SLO 5.0s" in why and "21 waiting" in why and "HBM 97%" in why
    assert "TBT" not in why
    tbt = {"ttft_slo_s": 5.0, "tbt_slo_s": 0.1,
           "window": {"requests": 40, "finished": 35, "ttft_attainment": 1.0, "tbt_attainment": 0.8,
                      "tbt_gap_attainment": 0.9, "tbt_p99_s": 0.45, "rotations_per_finished": 4.2}}
    why = explain(tbt, 0.9, Context(now=1000.0, window_s=60.0, rotary=3,
                                    param_change=(980.0, 3, "alpha 3 → 6")))
    assert "TBT misses" in why and "450ms vs SLO 100ms" in why and "4.2 rotations/finished" in why
    assert "3 rotary" in why and "params v3 20s ago (alpha 3 → 6)" in why
    few = explain({"window": {"requests": 4}}, 0.9, Context(now=0.0, window_s=60.0))
    assert "4 requests in the 60s window (< 10): not judged" == few
    fine = explain({"window": {"requests": 40, "finished": 40, "ttft_attainment": 1.0, "slo_attainment": 1.0}},
                   0.9, Context(now=0.0, window_s=60.0, restart_at=-10.0))
    assert fine == "daemon restarted 10s ago: window refilling; within target 90%"
